#pragma once
// Small helpers shared by the wire formats (internal to provider/). Model streams are read
// leniently: a field of the wrong type is treated as absent rather than failing a stream whose
// meaning is still clear, which is why these do not use util/json.hpp's strict getters.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "provider/types.hpp"
#include "util/json.hpp"

namespace sb::provider {

// The string at `key`, or "" when absent or not a string.
inline std::string string_field(const json::object& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->value().is_string()) return {};
  return std::string(it->value().get_string());
}

// The integer at `key`, or 0 when absent, null or not an integral number.
inline std::int64_t int_field(const json::object& obj, std::string_view key) {
  auto value = get_int(obj, key);
  return value && *value ? **value : 0;
}

// The object at `key`, or nullptr when absent or not an object.
inline const json::object* object_field(const json::object& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->value().is_object()) return nullptr;
  return &it->value().get_object();
}

// A stream event's JSON is parsed into a buffer of this size on the parser's stack (a
// json::monotonic_resource over it; a larger event takes the rest from the heap): it is read and
// dropped, and what the parser keeps is copied out of it.
inline constexpr std::size_t kStreamEventBuffer = 4096;

// One event of a model stream, which must be a JSON object, parsed into `sp`. The error says what
// is wrong: parse_json's words, or the kind of value that came instead of an object.
inline Result<json::value> parse_stream_object(std::string_view data, json::storage_ptr sp) {
  auto parsed = parse_json(data, 64, std::move(sp));
  if (parsed && !parsed->is_object())
    return Error{ErrorCode::InvalidRequest,
                 "expected an object, got " + std::string(kind_name(*parsed))};
  return parsed;
}

inline std::string_view trim_ascii_space(std::string_view text) {
  std::size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  std::size_t end = text.find_last_not_of(" \t\r\n");
  return text.substr(begin, end - begin + 1);
}

// A history tool call's input as the JSON text of an object ({} for anything else; see
// ModelToolCall::input).
inline std::string tool_input_as_object_text(const json::value& input) {
  return input.is_object() ? json::serialize(input) : std::string("{}");
}

// Error types/codes that name a transient condition worth retrying.
inline bool is_transient_error_name(std::string_view name) {
  return name == "rate_limit_error" || name == "rate_limit_exceeded" ||
         name == "overloaded_error" || name == "api_error" || name == "server_error" ||
         name == "timeout_error" || name == "service_unavailable" || name == "internal_error";
}

// `body` serialized, with the member "tools" (the tools array as JSON text, made once per tool
// set) added unless the set is empty: the tools are most of a request body and the same at every
// step, so they are not rebuilt and serialized again each time.
inline std::string serialize_with_tools(const json::object& body, const ToolSet& tools,
                                        std::string_view format,
                                        json::array (*build)(const std::vector<ToolSchema>&)) {
  std::string out = json::serialize(body);
  if (tools.empty()) return out;
  const std::string& array = tools.serialized(format, build);
  // `out` is an object, so it ends with '}'; the new member goes in front of it.
  out.pop_back();
  out.reserve(out.size() + array.size() + 11);
  if (!body.empty()) out += ',';
  out += "\"tools\":";
  out += array;
  out += '}';
  return out;
}

}  // namespace sb::provider
