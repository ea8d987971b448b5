#pragma once
// Reading the server's JSON leniently (a missing or mistyped field reads as empty), and making
// text safe to send as JSON.
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace switchboard::detail {

namespace json = boost::json;

inline std::string string_field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->get_string()) : std::string();
}

inline std::int64_t int_field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (!v) return 0;
  if (v->is_int64()) return v->get_int64();
  if (v->is_uint64()) return static_cast<std::int64_t>(v->get_uint64());
  if (v->is_double()) return static_cast<std::int64_t>(v->get_double());
  return 0;
}

inline const json::object& object_field(const json::object& o, std::string_view key) {
  static const json::object empty;
  const json::value* v = o.if_contains(key);
  return v && v->is_object() ? v->get_object() : empty;
}

// `text` with every invalid UTF-8 sequence replaced by U+FFFD: a handler may return bytes read
// from anywhere, and the server refuses JSON that is not UTF-8.
std::string valid_utf8(std::string text);

}  // namespace switchboard::detail
