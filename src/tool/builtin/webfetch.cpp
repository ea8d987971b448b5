#include "tool/builtin/webfetch.hpp"

#include <iconv.h>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/url.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "net/http_client.hpp"
#include "tool/builtin/html_convert.hpp"
#include "util/base64.hpp"
#include "util/text.hpp"

namespace sb::tool {

namespace asio = boost::asio;

namespace {

constexpr std::string_view kDescription =
    R"txt(Fetches a URL and returns its content as markdown (the default), plain text or raw HTML.

Use it to read web pages, documentation, raw files and API responses that the task needs.

Usage notes:
- The URL must be a complete http:// or https:// URL.
- format: "markdown" (default) turns HTML into markdown with headings, links, lists and code blocks; "text" keeps only the visible text; "html" returns the page as served. Content that is not HTML (plain text, JSON, source code) is returned as it is, whatever the format.
- Redirects are followed (up to 5). Responses larger than 5 MiB, error statuses (4xx, 5xx) and binary files (PDF, archives) are reported as errors; images are returned as attachments.
- timeout is in seconds (default 30, at most 120) and covers the whole request.
- The tool only reads: it sends a GET request and changes nothing locally.
- If another tool offers better web access for the task (a search tool, an API client), prefer it.
- Very long results are cut and saved to a file that you can read in parts.)txt";

constexpr std::string_view kSchema = R"json({
  "type": "object",
  "properties": {
    "url": {"type": "string", "description": "The URL to fetch content from (http:// or https://)"},
    "format": {
      "type": "string",
      "enum": ["text", "markdown", "html"],
      "description": "The format to return the content in (text, markdown, or html). Defaults to markdown."
    },
    "timeout": {"type": "number", "description": "Optional timeout in seconds (max 120)"}
  },
  "required": ["url"]
})json";

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool is_utf8_name(std::string_view charset) {
  std::string c = ascii_lower(charset);
  return c.empty() || c == "utf-8" || c == "utf8" || c == "us-ascii" || c == "ascii";
}

// The body as UTF-8: converted from the declared charset with iconv when it is another one
// (Latin-1 pages still exist), invalid sequences replaced with U+FFFD either way.
std::string to_utf8(std::string_view body, const std::string& charset) {
  if (is_utf8_name(charset)) return repair_utf8(body);
  iconv_t cd = ::iconv_open("UTF-8", charset.c_str());
  if (cd == reinterpret_cast<iconv_t>(-1)) return repair_utf8(body);
  std::string out(body.size() * 4 + 16, '\0');
  char* in = const_cast<char*>(body.data());
  std::size_t in_left = body.size();
  std::size_t used = 0;
  while (in_left > 0) {
    char* dst = out.data() + used;
    std::size_t out_left = out.size() - used;
    std::size_t r = ::iconv(cd, &in, &in_left, &dst, &out_left);
    used = out.size() - out_left;
    if (r != static_cast<std::size_t>(-1)) break;
    if (errno == E2BIG) {
      out.resize(out.size() * 2);
    } else {  // EILSEQ, EINVAL: a byte the charset does not define, or a cut-off sequence
      ++in;
      --in_left;
      if (out.size() - used < 3) out.resize(out.size() * 2);
      std::memcpy(out.data() + used, "\xEF\xBF\xBD", 3);
      used += 3;
    }
  }
  ::iconv_close(cd);
  out.resize(used);
  return repair_utf8(out);
}

bool is_html_type(std::string_view type) {
  return type == "text/html" || type == "application/xhtml+xml";
}

// Media types that are text even when they do not start with text/.
bool is_text_type(std::string_view type) {
  if (starts_with(type, "text/")) return true;
  if (ends_with(type, "+json") || ends_with(type, "+xml") || ends_with(type, "+yaml")) return true;
  for (std::string_view t :
       {"application/json", "application/xml", "application/javascript", "application/ecmascript",
        "application/x-javascript", "application/x-sh", "application/x-httpd-php",
        "application/yaml", "application/x-yaml", "application/toml", "application/sql",
        "application/graphql", "application/x-www-form-urlencoded", "application/x-ndjson",
        "image/svg+xml"})
    if (type == t) return true;
  return false;
}

bool is_binary(std::string_view type, std::string_view body) {
  if (is_text_type(type)) return false;
  for (std::string_view prefix : {"audio/", "video/", "font/", "image/", "model/"})
    if (starts_with(type, prefix)) return true;
  for (std::string_view t : {"application/pdf", "application/zip", "application/gzip",
                             "application/x-gzip", "application/x-tar", "application/x-bzip2",
                             "application/x-xz", "application/x-7z-compressed",
                             "application/vnd.rar", "application/wasm", "application/msword"})
    if (type == t) return true;
  // Unknown or generic (application/octet-stream, none at all): text has no NUL bytes.
  return body.substr(0, 8192).find('\0') != std::string_view::npos;
}

std::string accept_header(const std::string& format) {
  if (format == "text") return "text/plain;q=1.0, text/markdown;q=0.9, text/html;q=0.8, */*;q=0.1";
  if (format == "html")
    return "text/html;q=1.0, application/xhtml+xml;q=0.9, text/plain;q=0.8, text/markdown;q=0.7, "
           "*/*;q=0.1";
  return "text/markdown;q=1.0, text/x-markdown;q=0.9, text/plain;q=0.8, text/html;q=0.7, "
         "*/*;q=0.1";
}

std::string mib(std::size_t bytes) {
  if (bytes % (1024 * 1024) == 0) return std::to_string(bytes / (1024 * 1024)) + " MiB";
  return std::to_string(bytes) + " bytes";
}

std::string seconds_text(std::chrono::milliseconds ms) {
  if (ms.count() % 1000 == 0) return std::to_string(ms.count() / 1000) + " seconds";
  return std::to_string(ms.count()) + " ms";
}

ErrorCode status_error_code(int status) {
  if (status == 404 || status == 410) return ErrorCode::NotFound;
  if (status == 401 || status == 403) return ErrorCode::Forbidden;
  if (status == 429) return ErrorCode::RateLimited;
  if (status >= 500) return ErrorCode::Unavailable;
  return ErrorCode::InvalidRequest;
}

// The shared part of the whole-request deadline: the timer's handler may run after the
// coroutine that armed it has finished, so it holds nothing of the coroutine's frame. Both run
// on the executor.
struct Deadline {
  std::shared_ptr<AbortSignal> signal = AbortSignal::create();
  bool fired = false;
};

class WebFetchTool final : public BasicTool {
 public:
  explicit WebFetchTool(WebFetchOptions options)
      : BasicTool("webfetch", std::string(kDescription), kSchema), o_(options) {}

  asio::awaitable<Result<ToolResult>> execute(json::object args, ToolContext& ctx) override {
    auto url_arg = require_string(args, "url");
    if (!url_arg) co_return url_arg.error();
    std::string url(trim(*url_arg));
    auto format_arg = get_string(args, "format");
    if (!format_arg) co_return format_arg.error();
    std::string format = format_arg->value_or("markdown");
    if (format != "markdown" && format != "text" && format != "html")
      co_return make_error(
          ErrorCode::InvalidRequest,
          "format must be \"markdown\", \"text\" or \"html\", got \"" + format + "\"");
    std::chrono::milliseconds timeout = o_.default_timeout;
    if (auto it = args.find("timeout"); it != args.end() && !it->value().is_null()) {
      if (!it->value().is_number())
        co_return make_error(ErrorCode::InvalidRequest, "timeout must be a number of seconds");
      double seconds = it->value().to_number<double>();
      if (!(seconds > 0))
        co_return make_error(ErrorCode::InvalidRequest,
                             "timeout must be a positive number of seconds");
      timeout = std::min(
          o_.max_timeout,
          std::chrono::milliseconds(static_cast<std::int64_t>(std::min(seconds, 1e9) * 1000)));
    }

    std::string scheme = ascii_lower(url.substr(0, url.find(':')));
    if (url.find("://") == std::string::npos || (scheme != "http" && scheme != "https"))
      co_return make_error(ErrorCode::InvalidRequest,
                           "URL must start with http:// or https://, got \"" + url + "\"");
    if (auto parsed = boost::urls::parse_absolute_uri(url);
        !parsed || parsed->encoded_host().empty())
      co_return make_error(ErrorCode::InvalidRequest,
                           "\"" + url + "\" is not a valid URL (http(s)://host/path)");

    PermissionRequest request;
    request.permission = "webfetch";
    request.patterns = {url};
    request.always = {"*"};
    request.metadata =
        json::object{{"url", url}, {"format", format}, {"timeout", timeout.count() / 1000.0}};
    if (auto allowed = co_await ctx.request_permission(std::move(request)); !allowed)
      co_return allowed.error();

    // One signal ends the request: the turn's abort or the whole-request deadline.
    auto deadline = std::make_shared<Deadline>();
    AbortSignal* outer = ctx.abort.get();
    AbortSignal::Registration forward(ctx.abort, [deadline, outer] {
      deadline->signal->abort(outer->reason().empty() ? "aborted" : outer->reason());
    });
    asio::steady_timer timer(co_await asio::this_coro::executor, timeout);
    timer.async_wait([deadline](boost::system::error_code ec) {
      if (ec) return;
      deadline->fired = true;
      deadline->signal->abort("timed out");
    });

    net::HttpRequestSpec spec;
    spec.method = "GET";
    spec.url = url;
    spec.headers = {
        {"User-Agent", "Mozilla/5.0 (compatible; switchboard/" SWITCHBOARD_VERSION "; +webfetch)"},
        {"Accept", accept_header(format)},
        {"Accept-Language", "en-US,en;q=0.9"}};
    spec.connect_timeout = timeout;
    spec.read_timeout = timeout;
    spec.abort = deadline->signal;
    spec.max_body_bytes = o_.max_response_bytes;
    spec.max_redirects = o_.max_redirects;
    auto response = co_await net::fetch(std::move(spec));
    timer.cancel();

    if (!response) {
      if (ctx.abort && ctx.abort->aborted())
        co_return make_error(ErrorCode::Unavailable, "aborted");
      if (deadline->fired || response.error().code == ErrorCode::Timeout)
        co_return make_error(ErrorCode::Timeout,
                             "Request to " + url + " timed out after " + seconds_text(timeout));
      if (response.error().code == ErrorCode::TooLarge)
        co_return make_error(
            ErrorCode::TooLarge,
            "Response too large (exceeds the " + mib(o_.max_response_bytes) + " limit): " + url);
      co_return make_error(response.error().code,
                           "Failed to fetch " + url + ": " + response.error().message);
    }

    const auto& head = response->head;
    if (head.status >= 300 && head.status < 400 && !head.header("location").empty())
      co_return make_error(ErrorCode::InvalidRequest,
                           "Too many redirects (more than " + std::to_string(o_.max_redirects) +
                               ") fetching " + url + "; the last one pointed to " +
                               head.header("location"));
    if (head.status < 200 || head.status >= 300)
      co_return make_error(status_error_code(head.status), "Request failed with status code " +
                                                               std::to_string(head.status) + " (" +
                                                               head.final_url + ")");

    std::string content_type = head.header("content-type");
    MediaType media = parse_media_type(content_type);
    const std::string& body = response->body;
    ToolResult result;
    result.title = url + " (" + (content_type.empty() ? "unknown type" : content_type) + ")";
    result.metadata = json::object{{"url", url},
                                   {"finalUrl", head.final_url},
                                   {"status", head.status},
                                   {"contentType", content_type},
                                   {"bytes", body.size()}};

    if (starts_with(media.type, "image/") && media.type != "image/svg+xml") {
      std::string name = url.substr(url.rfind('/') + 1);
      name = name.substr(0, name.find_first_of("?#"));
      result.output = "Image fetched successfully (" + media.type + ", " +
                      std::to_string(body.size()) + " bytes); it is attached.";
      result.attachments.push_back(
          json::object{{"type", "file"},
                       {"mime", media.type},
                       {"url", "data:" + media.type + ";base64," + base64_encode(body)},
                       {"filename", name.empty() ? "image" : name}});
      co_return result;
    }
    if (is_binary(media.type, body))
      co_return make_error(
          ErrorCode::InvalidRequest,
          "The response is binary (" +
              (content_type.empty() ? std::string("no content type") : media.type) + ", " +
              std::to_string(body.size()) + " bytes) and cannot be shown as text: " + url);

    bool html = is_html_type(media.type) || (media.type.empty() && looks_like_html(body));
    if (!html || format == "html") {
      result.output = to_utf8(body, media.charset);
    } else {
      HtmlConvertOptions convert{head.final_url.empty() ? url : head.final_url, media.charset};
      result.output =
          format == "text" ? html_to_text(body, convert) : html_to_markdown(body, convert);
      if (result.output.empty() && !body.empty())
        result.output =
            "(The page has no visible text. It may build its content with JavaScript, which "
            "webfetch does not run; format \"html\" shows the page as served.)";
    }
    co_return result;
  }

 private:
  WebFetchOptions o_;
};

}  // namespace

MediaType parse_media_type(std::string_view content_type) {
  MediaType out;
  std::size_t semi = content_type.find(';');
  out.type = ascii_lower(trim(content_type.substr(0, semi)));
  while (semi != std::string_view::npos) {
    std::size_t next = content_type.find(';', semi + 1);
    std::string_view param = trim(content_type.substr(semi + 1, next - semi - 1));
    semi = next;
    std::size_t eq = param.find('=');
    if (eq == std::string_view::npos || ascii_lower(trim(param.substr(0, eq))) != "charset")
      continue;
    std::string_view value = trim(param.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
      value = value.substr(1, value.size() - 2);
    out.charset = std::string(value);
  }
  return out;
}

ToolPtr make_webfetch_tool(WebFetchOptions options) {
  return std::make_shared<WebFetchTool>(options);
}

}  // namespace sb::tool
