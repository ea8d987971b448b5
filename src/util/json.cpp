#include "util/json.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "util/text.hpp"

namespace sb {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidRequest:
      return "INVALID_REQUEST";
    case ErrorCode::Unauthorized:
      return "UNAUTHORIZED";
    case ErrorCode::Forbidden:
      return "FORBIDDEN";
    case ErrorCode::NotFound:
      return "NOT_FOUND";
    case ErrorCode::Conflict:
      return "CONFLICT";
    case ErrorCode::TooLarge:
      return "TOO_LARGE";
    case ErrorCode::RateLimited:
      return "RATE_LIMITED";
    case ErrorCode::Internal:
      return "INTERNAL_ERROR";
    case ErrorCode::Unavailable:
      return "UNAVAILABLE";
    case ErrorCode::Timeout:
      return "TIMEOUT";
  }
  return "INTERNAL_ERROR";
}

void throw_exception_from_error(const Error& e, const boost::source_location&) {
  throw std::runtime_error(std::string(error_code_name(e.code)) + ": " + e.message);
}

void dereferenced_error(const Error& e) {
  std::string what =
      "a Result holding an error was dereferenced: " + std::string(error_code_name(e.code)) + ": " +
      e.message;
#ifndef NDEBUG
  std::fprintf(stderr, "%s\n", what.c_str());
  std::abort();
#else
  throw std::logic_error(what);
#endif
}

namespace {
// The escape of each byte that needs one: its letter after the backslash, 'u' for \u00XX.
constexpr std::array<char, 256> kEscapes = [] {
  std::array<char, 256> t{};
  for (int c = 0; c < 0x20; ++c)
    t[c] = 'u';
  t['\b'] = 'b';
  t['\f'] = 'f';
  t['\n'] = 'n';
  t['\r'] = 'r';
  t['\t'] = 't';
  t['"'] = '"';
  t['\\'] = '\\';
  return t;
}();

// Whether any of 8 bytes is '"', '\\' or below 0x20 (exact for "any", which is all that is
// asked): most text has long runs without one, which are then checked 8 bytes at a time.
bool any_needs_escape(std::uint64_t w) {
  constexpr std::uint64_t kOnes = 0x0101010101010101ull;
  constexpr std::uint64_t kHighs = 0x8080808080808080ull;
  auto any_zero = [](std::uint64_t v) { return (v - kOnes) & ~v & kHighs; };
  std::uint64_t below_space = (w - kOnes * 0x20) & ~w & kHighs;
  return (below_space | any_zero(w ^ (kOnes * '"')) | any_zero(w ^ (kOnes * '\\'))) != 0;
}

}  // namespace

void append_json_string(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  constexpr std::uint64_t kHighs = 0x8080808080808080ull;
  out.reserve(out.size() + text.size() + 2);
  out.push_back('"');
  const auto* run = reinterpret_cast<const unsigned char*>(text.data());  // not yet copied
  const auto* end = run + text.size();
  auto flush = [&](const unsigned char* p) {
    out.append(reinterpret_cast<const char*>(run), reinterpret_cast<const char*>(p));
  };
  const unsigned char* p = run;
  while (p != end) {
    if (end - p >= 8) {
      std::uint64_t word;
      std::memcpy(&word, p, 8);
      if (!any_needs_escape(word) && (word & kHighs) == 0) {
        p += 8;
        continue;
      }
    }
    if (*p >= 0x80) {
      // Bytes that are not UTF-8 (a cut multibyte character, a Latin-1 path) become U+FFFD as
      // repair_utf8 replaces them: a JSON text must be UTF-8, and a reader (ours included)
      // refuses one that is not.
      Utf8Step step = utf8_step({reinterpret_cast<const char*>(p), std::size_t(end - p)});
      if (!step.valid) {
        flush(p);
        out.append("\xEF\xBF\xBD");
        run = p + step.size;
      }
      p += step.size;
      continue;
    }
    char escape = kEscapes[*p];
    if (escape == 0) {
      ++p;
      continue;
    }
    flush(p);
    run = p + 1;
    char seq[6] = {'\\', escape};
    if (escape != 'u') {
      out.append(seq, 2);
    } else {
      seq[2] = '0';
      seq[3] = '0';
      seq[4] = kHex[*p >> 4];
      seq[5] = kHex[*p & 15];
      out.append(seq, 6);
    }
    ++p;
  }
  flush(end);
  out.push_back('"');
}

std::string json_error_message(std::string_view text, std::size_t used,
                               const boost::system::error_code& ec, std::size_t max_depth,
                               std::string_view depth_setting) {
  // Count lines up to where the parser stopped, so the message points at the problem.
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < used && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  if (text.empty() || (ec == json::error::incomplete && used == text.size() &&
                       text.find_first_not_of(" \t\r\n") == std::string_view::npos))
    return "invalid JSON: empty body";
  std::string what = ec.message();
  if (ec == json::error::too_deep) {
    what = "nested deeper than the limit of " + std::to_string(max_depth) + " levels";
    if (!depth_setting.empty()) what += " (" + std::string(depth_setting) + ")";
  }
  return "invalid JSON at line " + std::to_string(line) + ", column " + std::to_string(col) + ": " +
         what;
}

Result<json::value> parse_json(std::string_view text, std::size_t max_depth, json::storage_ptr sp,
                               std::string_view depth_setting) {
  json::parse_options opts;
  opts.max_depth = max_depth;
  // The parser's own scratch space, on the stack: small documents then cost it no allocation.
  unsigned char scratch[1024];
  json::stream_parser parser({}, opts, scratch, sizeof scratch);
  parser.reset(std::move(sp));
  boost::system::error_code ec;
  std::size_t used = parser.write_some(text.data(), text.size(), ec);
  if (!ec && used < text.size()) ec = json::error::extra_data;
  if (!ec) parser.finish(ec);
  if (ec)
    return make_error(ErrorCode::InvalidRequest,
                      json_error_message(text, used, ec, max_depth, depth_setting));
  return parser.release();
}

std::string field_path(std::string_view prefix, std::string_view key) {
  if (prefix.empty()) return std::string(key);
  std::string out(prefix);
  out.push_back('.');
  out.append(key);
  return out;
}

std::string escape_pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out.push_back(c);
  }
  return out;
}

std::string_view kind_name(const json::value& v) {
  return v.is_int64() || v.is_uint64() ? "number" : schema_type_name(v);
}

std::string_view schema_type_name(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return "boolean";
    case json::kind::int64:
    case json::kind::uint64:
      return "integer";
    case json::kind::double_:
      return "number";
    case json::kind::string:
      return "string";
    case json::kind::array:
      return "array";
    case json::kind::object:
      return "object";
  }
  return "value";
}

std::optional<std::int64_t> exact_int64(std::uint64_t u) {
  if (u > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<std::int64_t>(u);
}

std::optional<std::int64_t> exact_int64(double d) {
  // Converting a double outside int64's range is undefined behaviour (1e300 is valid JSON).
  if (d >= -9223372036854775808.0 && d < 9223372036854775808.0 &&
      d == static_cast<double>(static_cast<std::int64_t>(d)))
    return static_cast<std::int64_t>(d);
  return std::nullopt;
}

namespace {
Error wrong_type(std::string_view prefix, std::string_view key, std::string_view want,
                 const json::value& got) {
  return make_error(ErrorCode::InvalidRequest, field_path(prefix, key) + " must be " +
                                                   std::string(want) + ", got " +
                                                   std::string(kind_name(got)));
}

const json::value* find(const json::object& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->value().is_null()) return nullptr;
  return &it->value();
}
}  // namespace

std::string string_or(const json::object& obj, std::string_view key, std::string fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->value().is_string()) return fallback;
  return std::string(it->value().get_string());
}

const json::object* object_at(const json::object& obj, std::string_view key) {
  auto it = obj.find(key);
  return it != obj.end() && it->value().is_object() ? &it->value().get_object() : nullptr;
}

Result<std::optional<std::string>> get_string(const json::object& obj, std::string_view key,
                                              std::string_view prefix) {
  const json::value* v = find(obj, key);
  if (!v) return std::optional<std::string>{};
  if (!v->is_string()) return wrong_type(prefix, key, "a string", *v);
  return std::optional<std::string>{std::string(v->get_string())};
}

Result<std::optional<std::int64_t>> get_int(const json::object& obj, std::string_view key,
                                            std::string_view prefix) {
  const json::value* v = find(obj, key);
  if (!v) return std::optional<std::int64_t>{};
  if (v->is_int64()) return std::optional<std::int64_t>{v->get_int64()};
  if (auto i = v->is_uint64()   ? exact_int64(v->get_uint64())
               : v->is_double() ? exact_int64(v->get_double())
                                : std::nullopt)
    return std::optional<std::int64_t>{*i};
  return wrong_type(prefix, key, "an integer", *v);
}

Result<std::optional<bool>> get_bool(const json::object& obj, std::string_view key,
                                     std::string_view prefix) {
  const json::value* v = find(obj, key);
  if (!v) return std::optional<bool>{};
  if (!v->is_bool()) return wrong_type(prefix, key, "a boolean", *v);
  return std::optional<bool>{v->get_bool()};
}

Result<const json::object*> get_object(const json::object& obj, std::string_view key,
                                       std::string_view prefix) {
  const json::value* v = find(obj, key);
  if (!v) return static_cast<const json::object*>(nullptr);
  if (!v->is_object()) return wrong_type(prefix, key, "an object", *v);
  return &v->get_object();
}

Result<const json::array*> get_array(const json::object& obj, std::string_view key,
                                     std::string_view prefix) {
  const json::value* v = find(obj, key);
  if (!v) return static_cast<const json::array*>(nullptr);
  if (!v->is_array()) return wrong_type(prefix, key, "an array", *v);
  return &v->get_array();
}

Result<std::string> require_string(const json::object& obj, std::string_view key,
                                   std::string_view prefix) {
  auto s = get_string(obj, key, prefix);
  if (!s) return s.error();
  if (!*s || (*s)->empty())
    return make_error(ErrorCode::InvalidRequest, field_path(prefix, key) + " is required");
  return std::move(**s);
}

json::object error_body(const Error& e) {
  // A message may quote what the caller sent (a path segment decoded from %FF): the body must
  // still be JSON, which Boost.JSON does not check when it serializes.
  json::string message =
      is_valid_utf8(e.message) ? json::string(e.message) : json::string(repair_utf8(e.message));
  return json::object{
      {"error", json::object{{"code", error_code_name(e.code)}, {"message", std::move(message)}}}};
}

namespace {
// Whether `v` can be written as it is: no number that is not finite (1e400 parses as infinity)
// and no string or key that is not UTF-8 (a tool's metadata made of a command's raw output).
bool writable_as_is(const json::value& v) {
  switch (v.kind()) {
    case json::kind::double_:
      return std::isfinite(v.get_double());
    case json::kind::string:
      return is_valid_utf8(v.get_string());
    case json::kind::array:
      for (const auto& e : v.get_array())
        if (!writable_as_is(e)) return false;
      return true;
    case json::kind::object:
      for (const auto& kv : v.get_object())
        if (!is_valid_utf8(kv.key()) || !writable_as_is(kv.value())) return false;
      return true;
    default:
      return true;
  }
}

json::string repaired(json::string_view text) {
  return is_valid_utf8(text) ? json::string(text) : json::string(repair_utf8(text));
}

// `v` made writable: such numbers null, such bytes U+FFFD (as append_json_string writes them).
json::value made_writable(const json::value& v) {
  switch (v.kind()) {
    case json::kind::double_:
      return std::isfinite(v.get_double()) ? v : json::value(nullptr);
    case json::kind::string:
      return repaired(v.get_string());
    case json::kind::array: {
      json::array out;
      out.reserve(v.get_array().size());
      for (const auto& e : v.get_array())
        out.push_back(made_writable(e));
      return out;
    }
    case json::kind::object: {
      json::object out;
      out.reserve(v.get_object().size());
      for (const auto& kv : v.get_object())
        out[repaired(kv.key())] = made_writable(kv.value());
      return out;
    }
    default:
      return v;
  }
}
}  // namespace

void append_json_value(std::string& out, const json::value& value) {
  if (!writable_as_is(value)) {
    append_json_value(out, made_writable(value));
    return;
  }
  json::serializer serializer;
  serializer.reset(&value);
  while (!serializer.done()) {
    std::size_t used = out.size();
    out.resize(used + 512);
    out.resize(used + serializer.read(out.data() + used, 512).size());
  }
}

std::string& ObjectWriter::key(std::string_view key) {
  if (!first_) out_.push_back(',');
  first_ = false;
  out_.push_back('"');
  out_.append(key);
  out_.append("\":");
  return out_;
}

ObjectWriter& ObjectWriter::string(std::string_view key, std::string_view value) {
  append_json_string(this->key(key), value);
  return *this;
}

ObjectWriter& ObjectWriter::integer(std::string_view key, std::int64_t value) {
  char digits[24];
  auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
  this->key(key).append(digits, end);
  return *this;
}

ObjectWriter& ObjectWriter::number(std::string_view key, double value) {
  std::string& out = this->key(key);
  if (!std::isfinite(value)) {
    out.append("null");
    return *this;
  }
  char digits[32];
  auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
  out.append(digits, end);
  return *this;
}

ObjectWriter& ObjectWriter::value(std::string_view key, const json::value& value) {
  append_json_value(this->key(key), value);
  return *this;
}

}  // namespace sb
