#include "util/json.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace sb {

// Readable failure messages: "NOT_FOUND" rather than a dump of the enum's bytes.
inline void PrintTo(ErrorCode code, std::ostream* os) {
  *os << error_code_name(code);
}

namespace {

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

json::object parse_object(std::string_view text) {
  auto r = parse_json(text);
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
  if (!r || !r->is_object()) return {};
  return r->get_object();
}

// ---- parse_json -------------------------------------------------------------------------------

TEST(ParseJson, ParsesObjectsArraysAndScalars) {
  auto doc = parse_json(R"({"a": 1, "b": [true, null, "x"], "c": {"d": -2.5}})");
  ASSERT_TRUE(doc.has_value()) << doc.error().message;
  ASSERT_TRUE(doc->is_object());
  const auto& obj = doc->get_object();
  EXPECT_EQ(obj.at("a").as_int64(), 1);
  ASSERT_TRUE(obj.at("b").is_array());
  EXPECT_EQ(obj.at("b").get_array().size(), 3u);
  EXPECT_TRUE(obj.at("b").get_array()[0].as_bool());
  EXPECT_TRUE(obj.at("b").get_array()[1].is_null());
  EXPECT_EQ(obj.at("b").get_array()[2].as_string(), "x");
  EXPECT_DOUBLE_EQ(obj.at("c").at("d").as_double(), -2.5);

  auto scalar = parse_json("  42 \n");
  ASSERT_TRUE(scalar.has_value()) << scalar.error().message;
  EXPECT_EQ(scalar->as_int64(), 42);

  auto str = parse_json(R"("h\u00e9llo")");
  ASSERT_TRUE(str.has_value()) << str.error().message;
  EXPECT_EQ(str->as_string(), "h\xc3\xa9llo");
}

TEST(ParseJson, SyntaxErrorGivesLineAndColumn) {
  auto r = parse_json("{\n  \"a\": 1,\n  \"b\": }");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
  EXPECT_TRUE(Contains(r.error().message, "line 3, column 8"));
}

TEST(ParseJson, ErrorPositionOnFirstLine) {
  auto r = parse_json(R"({"a": 1,})");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
  EXPECT_TRUE(Contains(r.error().message, "line 1, column 9"));
}

TEST(ParseJson, TruncatedDocumentIsAnError) {
  auto r = parse_json("[1, 2");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
  EXPECT_TRUE(Contains(r.error().message, "invalid JSON at line 1"));
  EXPECT_FALSE(Contains(r.error().message, "empty body"));
}

TEST(ParseJson, TrailingDataIsAnError) {
  auto r = parse_json("{} x");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
  EXPECT_TRUE(Contains(r.error().message, "line 1, column 4"));

  EXPECT_FALSE(parse_json("{}{}").has_value());
}

TEST(ParseJson, EmptyBodyIsNamedAsSuch) {
  for (std::string_view text : {"", "   ", " \n\t\r\n "}) {
    auto r = parse_json(text);
    ASSERT_FALSE(r.has_value()) << "'" << text << "'";
    EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
    EXPECT_TRUE(Contains(r.error().message, "empty body")) << "'" << text << "'";
  }
}

TEST(ParseJson, RejectsNestingDeeperThanTheLimit) {
  std::string ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_TRUE(parse_json(ok).has_value());

  std::string deep = std::string(65, '[') + std::string(65, ']');
  auto r = parse_json(deep);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
  EXPECT_TRUE(Contains(r.error().message, "nested deeper than the limit of 64 levels"))
      << r.error().message;
  EXPECT_TRUE(Contains(r.error().message, "column 65")) << r.error().message;

  // The limit is a parameter; objects count as well as arrays.
  EXPECT_TRUE(parse_json(R"({"a": {"b": 1}})", 2).has_value());
  auto r2 = parse_json(R"({"a": {"b": {"c": 1}}})", 2);
  ASSERT_FALSE(r2.has_value());
  EXPECT_TRUE(Contains(r2.error().message, "limit of 2 levels")) << r2.error().message;

  // The setting that chose the limit is named, so that the reader knows what to change.
  auto r3 = parse_json(R"([[[1]]])", 2, {}, "server.maxJsonDepth");
  ASSERT_FALSE(r3.has_value());
  EXPECT_TRUE(Contains(r3.error().message, "limit of 2 levels (server.maxJsonDepth)"))
      << r3.error().message;
}

TEST(ParseJson, VeryDeepInputDoesNotCrash) {
  std::string deep(100000, '[');
  auto r = parse_json(deep);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
}

// ---- field helpers ----------------------------------------------------------------------------

TEST(FieldPath, JoinsPrefixAndKey) {
  EXPECT_EQ(field_path("", "id"), "id");
  EXPECT_EQ(field_path("tools[1]", "id"), "tools[1].id");
  EXPECT_EQ(field_path("a.b", "c"), "a.b.c");
}

// kind_name is for messages; schema_type_name names integers apart, as JSON Schema's "type" does.
TEST(KindName, NamesEveryKindAndSchemaTypeNamesIntegersApart) {
  struct Case {
    json::value value;
    std::string_view kind, schema_type;
  };
  const Case cases[] = {
      {nullptr, "null", "null"},
      {true, "boolean", "boolean"},
      {1, "number", "integer"},
      {1u, "number", "integer"},
      {1.5, "number", "number"},
      {10.0, "number", "number"},  // Boost.JSON keeps the kind the text had
      {"s", "string", "string"},
      {json::array{}, "array", "array"},
      {json::object{}, "object", "object"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(kind_name(c.value), c.kind) << json::serialize(c.value);
    EXPECT_EQ(schema_type_name(c.value), c.schema_type) << json::serialize(c.value);
  }
}

TEST(GetString, PresentAbsentNullAndWrongType) {
  auto obj = parse_object(R"({"s": "text", "empty": "", "n": null, "num": 3})");

  auto s = get_string(obj, "s");
  ASSERT_TRUE(s.has_value());
  ASSERT_TRUE(s->has_value());
  EXPECT_EQ(**s, "text");

  auto empty = get_string(obj, "empty");
  ASSERT_TRUE(empty.has_value());
  ASSERT_TRUE(empty->has_value());
  EXPECT_EQ(**empty, "");

  auto absent = get_string(obj, "missing");
  ASSERT_TRUE(absent.has_value());
  EXPECT_FALSE(absent->has_value());

  auto null = get_string(obj, "n");
  ASSERT_TRUE(null.has_value());
  EXPECT_FALSE(null->has_value());

  auto wrong = get_string(obj, "num", "tools[1]");
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().code, ErrorCode::InvalidRequest);
  EXPECT_EQ(wrong.error().message, "tools[1].num must be a string, got number");
}

TEST(GetInt, AcceptsIntegersInAnyJsonForm) {
  auto obj =
      parse_object(R"({"i": -7, "big": 9223372036854775807, "d": 5.0, "n": null, "zero": 0})");
  auto i = get_int(obj, "i");
  ASSERT_TRUE(i.has_value());
  EXPECT_EQ(i->value(), -7);
  auto big = get_int(obj, "big");
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(big->value(), INT64_MAX);
  auto d = get_int(obj, "d");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->value(), 5);
  auto zero = get_int(obj, "zero");
  ASSERT_TRUE(zero.has_value());
  EXPECT_EQ(zero->value(), 0);

  auto absent = get_int(obj, "missing");
  ASSERT_TRUE(absent.has_value());
  EXPECT_FALSE(absent->has_value());
  auto null = get_int(obj, "n");
  ASSERT_TRUE(null.has_value());
  EXPECT_FALSE(null->has_value());
}

TEST(GetInt, RejectsNonIntegers) {
  auto obj = parse_object(
      R"({"frac": 1.5, "huge": 18446744073709551615, "far": 1e300, "s": "5", "b": true})");
  for (const char* key : {"frac", "huge", "far", "s", "b"}) {
    auto r = get_int(obj, key, "clientTools");
    ASSERT_FALSE(r.has_value()) << key;
    EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
    EXPECT_TRUE(Contains(r.error().message,
                         "clientTools." + std::string(key) + " must be an integer, got "));
  }
  EXPECT_EQ(get_int(obj, "s").error().message, "s must be an integer, got string");
  EXPECT_EQ(get_int(obj, "b").error().message, "b must be an integer, got boolean");
}

TEST(GetBool, PresentAbsentNullAndWrongType) {
  auto obj = parse_object(R"({"t": true, "f": false, "n": null, "s": "true"})");
  EXPECT_EQ(get_bool(obj, "t")->value(), true);
  EXPECT_EQ(get_bool(obj, "f")->value(), false);
  EXPECT_FALSE(get_bool(obj, "missing")->has_value());
  EXPECT_FALSE(get_bool(obj, "n")->has_value());
  auto wrong = get_bool(obj, "s", "opts");
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().code, ErrorCode::InvalidRequest);
  EXPECT_EQ(wrong.error().message, "opts.s must be a boolean, got string");
}

TEST(GetObject, PresentAbsentNullAndWrongType) {
  auto obj = parse_object(R"({"o": {"k": 1}, "n": null, "a": [1]})");
  auto o = get_object(obj, "o");
  ASSERT_TRUE(o.has_value());
  ASSERT_NE(*o, nullptr);
  EXPECT_EQ((*o)->at("k").as_int64(), 1);

  auto absent = get_object(obj, "missing");
  ASSERT_TRUE(absent.has_value());
  EXPECT_EQ(*absent, nullptr);
  auto null = get_object(obj, "n");
  ASSERT_TRUE(null.has_value());
  EXPECT_EQ(*null, nullptr);

  auto wrong = get_object(obj, "a", "body");
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().code, ErrorCode::InvalidRequest);
  EXPECT_EQ(wrong.error().message, "body.a must be an object, got array");
}

TEST(GetArray, PresentAbsentNullAndWrongType) {
  auto obj = parse_object(R"({"a": [1, 2], "n": null, "o": {}})");
  auto a = get_array(obj, "a");
  ASSERT_TRUE(a.has_value());
  ASSERT_NE(*a, nullptr);
  EXPECT_EQ((*a)->size(), 2u);

  auto absent = get_array(obj, "missing");
  ASSERT_TRUE(absent.has_value());
  EXPECT_EQ(*absent, nullptr);
  auto null = get_array(obj, "n");
  ASSERT_TRUE(null.has_value());
  EXPECT_EQ(*null, nullptr);

  auto wrong = get_array(obj, "o");
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().code, ErrorCode::InvalidRequest);
  EXPECT_EQ(wrong.error().message, "o must be an array, got object");
}

TEST(RequireString, PresentNonEmptyStringIsReturned) {
  auto obj = parse_object(R"({"clientID": "c1"})");
  auto r = require_string(obj, "clientID");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, "c1");
}

TEST(RequireString, AbsentNullOrEmptyIsRequired) {
  auto obj = parse_object(R"({"n": null, "e": ""})");
  for (const char* key : {"missing", "n", "e"}) {
    auto r = require_string(obj, key, "result");
    ASSERT_FALSE(r.has_value()) << key;
    EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
    EXPECT_EQ(r.error().message, "result." + std::string(key) + " is required");
  }
}

TEST(RequireString, WrongTypeNamesTheField) {
  auto obj = parse_object(R"({"requestID": 12})");
  auto r = require_string(obj, "requestID");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
  EXPECT_EQ(r.error().message, "requestID must be a string, got number");
}

// ---- errors -----------------------------------------------------------------------------------

// A message quoting bytes that are not UTF-8 (a path segment sent as %FF%FE) still makes JSON.
TEST(ErrorBody, IsJsonWhenTheMessageQuotesBytesThatAreNotUtf8) {
  json::object body = error_body(make_error(ErrorCode::NotFound, "no session \xFF\xFE here"));
  auto reparsed = parse_json(json::serialize(body));
  ASSERT_TRUE(reparsed.has_value()) << reparsed.error().message;
  const auto& message = reparsed->at("error").at("message").as_string();
  EXPECT_TRUE(std::string_view(message).starts_with("no session "));
  EXPECT_TRUE(std::string_view(message).ends_with(" here"));
}

TEST(ErrorBody, HasCodeAndMessageUnderError) {
  json::object body = error_body(make_error(ErrorCode::NotFound, "Unknown client tool: x"));
  ASSERT_EQ(body.size(), 1u);
  ASSERT_TRUE(body.at("error").is_object());
  const auto& err = body.at("error").get_object();
  EXPECT_EQ(err.size(), 2u);
  EXPECT_EQ(err.at("code").as_string(), "NOT_FOUND");
  EXPECT_EQ(err.at("message").as_string(), "Unknown client tool: x");

  // What goes on the wire parses back to the same shape.
  auto reparsed = parse_json(json::serialize(body));
  ASSERT_TRUE(reparsed.has_value());
  EXPECT_EQ(*reparsed, json::value(body));
}

TEST(ErrorBody, EveryCodeHasItsWireName) {
  const std::pair<ErrorCode, const char*> cases[] = {
      {ErrorCode::InvalidRequest, "INVALID_REQUEST"},
      {ErrorCode::Unauthorized, "UNAUTHORIZED"},
      {ErrorCode::Forbidden, "FORBIDDEN"},
      {ErrorCode::NotFound, "NOT_FOUND"},
      {ErrorCode::Conflict, "CONFLICT"},
      {ErrorCode::TooLarge, "TOO_LARGE"},
      {ErrorCode::RateLimited, "RATE_LIMITED"},
      {ErrorCode::Internal, "INTERNAL_ERROR"},
      {ErrorCode::Unavailable, "UNAVAILABLE"},
      {ErrorCode::Timeout, "TIMEOUT"},
  };
  for (const auto& [code, name] : cases) {
    EXPECT_EQ(error_code_name(code), name);
    EXPECT_EQ(error_body(make_error(code, "m")).at("error").at("code").as_string(), name);
  }
}

TEST(ResultValue, ThrowsWithCodeAndMessageOnError) {
  Result<int> r = make_error(ErrorCode::Conflict, "already ended");
  try {
    (void)r.value();
    FAIL() << "value() of an error result must throw";
  } catch (const std::exception& e) {
    EXPECT_TRUE(Contains(std::string(e.what()), "CONFLICT"));
    EXPECT_TRUE(Contains(std::string(e.what()), "already ended"));
  }
}

}  // namespace
}  // namespace sb

namespace sb {
namespace {

std::string json_literal(std::string_view text) {
  std::string out;
  append_json_string(out, text);
  return out;
}

TEST(AppendJsonString, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(json_literal(""), R"("")");
  EXPECT_EQ(json_literal("plain text"), R"("plain text")");
  EXPECT_EQ(json_literal("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(json_literal("\b\f\n\r\t"), R"("\b\f\n\r\t")");
  EXPECT_EQ(json_literal(std::string_view("\0\x01\x1f", 3)), R"("\u0000\u0001\u001f")");
  EXPECT_EQ(json_literal("caf\xc3\xa9 \x7f"), "\"caf\xc3\xa9 \x7f\"")
      << "UTF-8 and DEL pass through";
  std::string out = "prefix:";
  append_json_string(out, "x");
  EXPECT_EQ(out, "prefix:\"x\"") << "appends";
}

// The same text as Boost.JSON's serializer writes, for every ASCII byte in every position of an
// 8-byte word, and the literal parses back to the original; a byte above 0x7f alone is not UTF-8
// and comes back as U+FFFD.
TEST(AppendJsonString, MatchesBoostJsonOnEveryByte) {
  for (int c = 0; c < 256; ++c) {
    std::vector<std::string> texts{std::string(1, char(c)), std::string(3, char(c)),
                                   std::string(20, char(c))};
    // Each position of a long text, so that the byte falls in every slot of an 8-byte word.
    for (std::size_t at = 0; at < 24; ++at) {
      std::string text = "abcdefghijklmnopqrstuvwx";
      text[at] = char(c);
      texts.push_back(text);
    }
    for (const auto& text : texts) {
      auto back = parse_json(json_literal(text));
      ASSERT_TRUE(back) << "byte " << c;
      if (c < 0x80) {
        EXPECT_EQ(json_literal(text), json::serialize(json::string_view(text))) << "byte " << c;
        EXPECT_EQ(back->as_string(), text) << "byte " << c;
        continue;
      }
      std::string replaced;
      for (char ch : text)
        replaced += ch == char(c) ? std::string("\xEF\xBF\xBD") : std::string(1, ch);
      EXPECT_EQ(back->as_string(), replaced) << "byte " << c;
    }
  }
}

// ---- ObjectWriter ---------------------------------------------------------------------------

TEST(ObjectWriter, WritesTheObjectThatAParserReadsBack) {
  std::string out = "prefix:";
  {
    ObjectWriter o(out);
    o.string("text", "quote \" backslash \\ newline \n tab \t bell \x07 \xc3\xa9 end");
    o.integer("min", std::numeric_limits<std::int64_t>::min());
    o.integer("max", std::numeric_limits<std::int64_t>::max());
    o.number("half", 0.5).number("big", 1e300).number("nan", std::nan(""));
    o.value("tree", json::value{{"a", json::array{1, "two", nullptr}}, {"b", true}});
    ObjectWriter nested(o.key("nested"));
    nested.close();
    o.close();
  }
  ASSERT_EQ(out.rfind("prefix:", 0), 0u) << "written after what the string held";
  json::object got = parse_object(std::string_view(out).substr(7));
  json::object want{{"text", "quote \" backslash \\ newline \n tab \t bell \x07 \xc3\xa9 end"},
                    {"min", std::numeric_limits<std::int64_t>::min()},
                    {"max", std::numeric_limits<std::int64_t>::max()},
                    {"half", 0.5},
                    {"big", 1e300},
                    {"nan", nullptr},
                    {"tree", json::value{{"a", json::array{1, "two", nullptr}}, {"b", true}}},
                    {"nested", json::object{}}};
  EXPECT_EQ(got, want) << out;
}

// Whatever the bytes, the text is JSON that a parser takes: what is not UTF-8 becomes U+FFFD,
// well-formed sequences of every length pass as they are.
TEST(AppendJsonString, BytesThatAreNotUtf8BecomeTheReplacementCharacter) {
  struct Case {
    std::string in, out;
  };
  const std::string r = "\xEF\xBF\xBD";
  std::vector<Case> cases = {
      {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
      {"cut \xe2\x82", "cut " + r},  // a character cut at the end: one, as repair_utf8 does
      {"latin1 \xe9t\xe9", "latin1 " + r + "t" + r},  // not UTF-8 at all
      {"\xc0\x80", r + r},                            // overlong NUL
      {"\xed\xa0\x80", r + r + r},                    // a surrogate
      {"\xf4\x90\x80\x80", r + r + r + r},            // above U+10FFFF
      {"\x80 lone continuation", r + " lone continuation"},
      {std::string(20, 'a') + "\xff" + std::string(20, 'b'),
       std::string(20, 'a') + r + std::string(20, 'b')},  // inside the 8-byte fast path
  };
  for (const auto& c : cases) {
    std::string out;
    append_json_string(out, c.in);
    auto back = parse_json(out);
    ASSERT_TRUE(back) << out << ": " << back.error().message;
    EXPECT_EQ(back->as_string(), c.out) << out;
  }
}

TEST(AppendJsonValue, NumbersBeyondADoubleAreWrittenAsNull) {
  auto parsed = parse_json(R"({"big":1e400,"list":[1,-1e400,{"x":2.5}]})");
  ASSERT_TRUE(parsed) << parsed.error().message;
  std::string out;
  append_json_value(out, *parsed);
  auto back = parse_json(out);
  ASSERT_TRUE(back) << out << ": " << back.error().message;
  EXPECT_EQ(*back, (json::value{{"big", nullptr}, {"list", json::array{1, nullptr, {{"x", 2.5}}}}}))
      << out;
}

// A value built from raw bytes (a tool's metadata holding a command's output) is written as
// valid JSON all the same: what is not UTF-8, in strings and in keys, becomes U+FFFD.
TEST(AppendJsonValue, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  const std::string bad =
      "a\xff\xc3"
      "b";
  json::value v{{"output", bad}, {bad, json::array{1, bad, 2.5}}, {"ok", "zo\xc3\xab"}};
  std::string out;
  append_json_value(out, v);
  auto back = parse_json(out);
  ASSERT_TRUE(back) << out << ": " << back.error().message;
  const std::string fixed =
      "a\xEF\xBF\xBD\xEF\xBF\xBD"
      "b";
  EXPECT_EQ(
      *back,
      (json::value{{"output", fixed}, {fixed, json::array{1, fixed, 2.5}}, {"ok", "zo\xc3\xab"}}))
      << out;
}

TEST(ObjectWriter, AnEmptyObjectIsBraces) {
  std::string out;
  ObjectWriter(out).close();
  EXPECT_EQ(out, "{}");
}

TEST(AppendJsonValue, WritesValuesLargerThanOneSerializerRead) {
  json::array big;
  for (int i = 0; i < 2000; ++i)
    big.push_back(json::value("item " + std::to_string(i)));
  std::string out;
  append_json_value(out, big);
  auto back = parse_json(out);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, json::value(big));
}

}  // namespace
}  // namespace sb
