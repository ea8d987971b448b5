#pragma once
// JSON helpers shared by every parser of outside bytes: parsing with a position in the error, and
// typed field access whose errors name the field ("tools[1].description must be a string").
#include <boost/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "util/error.hpp"

namespace sb {

namespace json = boost::json;

// Parses a whole document. Errors are InvalidRequest and say where ("line 3, column 7").
// `sp`: where the document lives (e.g. a monotonic_resource over a stack buffer for a document
// that is read and dropped); the default heap when null. `depth_setting`, when given, is the
// setting that chose `max_depth`: a document nested deeper is refused naming it.
Result<json::value> parse_json(std::string_view text, std::size_t max_depth = 64,
                               json::storage_ptr sp = {}, std::string_view depth_setting = {});

// The message parse_json gives (without its error code) when a parser of `text` stopped after
// `used` bytes with `ec`: for readers that parse with their own handler (json::basic_parser) and
// must fail in the same words.
std::string json_error_message(std::string_view text, std::size_t used,
                               const boost::system::error_code& ec, std::size_t max_depth,
                               std::string_view depth_setting = {});

// The integer a JSON number stands for exactly, or nullopt when it has a fraction or is out of
// int64's range.
std::optional<std::int64_t> exact_int64(std::uint64_t u);
std::optional<std::int64_t> exact_int64(double d);

// "prefix.key", or "key" when prefix is empty.
std::string field_path(std::string_view prefix, std::string_view key);

// Each returns nullopt when the key is absent or null, an error when present with another type.
Result<std::optional<std::string>> get_string(const json::object& obj, std::string_view key,
                                              std::string_view prefix = {});
Result<std::optional<std::int64_t>> get_int(const json::object& obj, std::string_view key,
                                            std::string_view prefix = {});
Result<std::optional<bool>> get_bool(const json::object& obj, std::string_view key,
                                     std::string_view prefix = {});
Result<const json::object*> get_object(const json::object& obj, std::string_view key,
                                       std::string_view prefix = {});  // nullptr when absent
Result<const json::array*> get_array(const json::object& obj, std::string_view key,
                                     std::string_view prefix = {});  // nullptr when absent

// Lenient reads of what the server made itself (events, its own stored shapes) or what a peer may
// leave out: the string at `key`, or `fallback` when absent or not a string; the object at `key`,
// or nullptr.
std::string string_or(const json::object& obj, std::string_view key, std::string fallback = {});
const json::object* object_at(const json::object& obj, std::string_view key);

// Present, non-empty string.
Result<std::string> require_string(const json::object& obj, std::string_view key,
                                   std::string_view prefix = {});

// The JSON name of a value's kind ("string", "object", "number", ...), for error messages.
std::string_view kind_name(const json::value& v);

// The JSON Schema type of a value: as kind_name, but a number written without fraction or
// exponent (Boost.JSON's int64 and uint64) is an "integer"; 10.0 stays a "number".
std::string_view schema_type_name(const json::value& v);

// A key as one token of a JSON Pointer (RFC 6901): "~" becomes "~0" and "/" becomes "~1".
std::string escape_pointer_token(std::string_view key);

// Appends `text` as a JSON string literal, quotes included, escaped as Boost.JSON's serializer
// escapes (", \\, control characters); bytes that are not UTF-8 become U+FFFD as repair_utf8
// replaces them, so the result is always valid JSON. For documents written without a tree, where
// the text is most of the bytes: runs that need nothing are copied whole.
void append_json_string(std::string& out, std::string_view text);

// Appends any JSON value as its text (Boost.JSON's serializer, straight into `out`), always valid
// JSON: a number too large for a double (1e400 parses as infinity) is written as null (Boost
// writes "Infinity", which no JSON reader takes), and bytes of a string or key that are not UTF-8
// (Boost writes them as they are) become U+FFFD, as append_json_string writes them.
void append_json_value(std::string& out, const json::value& value);

// Writes one JSON object as text into `out`, member by member, with no tree built first: for the
// documents written at every turn (stored rows, answers). Keys are written as given, so they are
// plain names that need no escape. The constructor writes "{", close() the "}".
class ObjectWriter {
 public:
  explicit ObjectWriter(std::string& out) : out_(out) { out_.push_back('{'); }
  ObjectWriter& string(std::string_view key, std::string_view value);
  ObjectWriter& integer(std::string_view key, std::int64_t value);
  ObjectWriter& number(std::string_view key, double value);  // null when not finite
  ObjectWriter& value(std::string_view key, const json::value& value);
  // Writes the key; the caller then writes its value into the returned string (a nested
  // ObjectWriter, an array).
  std::string& key(std::string_view key);
  void close() { out_.push_back('}'); }

 private:
  std::string& out_;
  bool first_ = true;
};

// {"error": {"code": ..., "message": ...}}
json::object error_body(const Error& e);

}  // namespace sb
