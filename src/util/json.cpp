#include "util/json.hpp"

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
  if (ec) {
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
      return make_error(ErrorCode::InvalidRequest, "invalid JSON: empty body");
    std::string what = ec.message();
    if (ec == json::error::too_deep) {
      what = "nested deeper than the limit of " + std::to_string(max_depth) + " levels";
      if (!depth_setting.empty()) what += " (" + std::string(depth_setting) + ")";
    }
    return make_error(ErrorCode::InvalidRequest, "invalid JSON at line " + std::to_string(line) +
                                                     ", column " + std::to_string(col) + ": " +
                                                     what);
  }
  return parser.release();
}

std::string field_path(std::string_view prefix, std::string_view key) {
  if (prefix.empty()) return std::string(key);
  std::string out(prefix);
  out.push_back('.');
  out.append(key);
  return out;
}

std::string_view kind_name(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return "boolean";
    case json::kind::int64:
    case json::kind::uint64:
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
  if (v->is_uint64() && v->get_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
    return std::optional<std::int64_t>{static_cast<std::int64_t>(v->get_uint64())};
  if (v->is_double()) {
    double d = v->get_double();
    // Converting a double outside int64's range is undefined behaviour (1e300 is valid JSON).
    if (d >= -9223372036854775808.0 && d < 9223372036854775808.0 &&
        d == static_cast<double>(static_cast<std::int64_t>(d)))
      return std::optional<std::int64_t>{static_cast<std::int64_t>(d)};
  }
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
  return json::object{
      {"error", json::object{{"code", error_code_name(e.code)}, {"message", e.message}}}};
}

}  // namespace sb
