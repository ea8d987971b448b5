// CompiledSchema: the keywords checked with RE2 instead of valijson's std::regex ("pattern",
// "patternProperties", "format"), what they accept and refuse, and inputs that std::regex could
// not survive.
#include "clienttool/schema.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

using namespace sb;
using sb::clienttool::CompiledSchema;
using ::testing::HasSubstr;

namespace {

std::shared_ptr<const CompiledSchema> compiled(std::string_view text) {
  auto doc = parse_json(text);
  EXPECT_TRUE(doc.has_value()) << text;
  auto schema = CompiledSchema::compile(*doc);
  EXPECT_TRUE(schema.has_value()) << (schema ? "" : schema.error().message);
  return schema ? *schema : nullptr;
}

std::string compile_error(std::string_view text) {
  auto schema = CompiledSchema::compile(parse_json(text).value());
  if (schema) return "compiled";
  EXPECT_EQ(schema.error().code, ErrorCode::InvalidRequest);
  return schema.error().message;
}

// "" when the input is valid, else the error message.
std::string check(const CompiledSchema& schema, std::string_view input) {
  auto r = schema.validate(parse_json(input).value());
  return r ? "" : r.error().message;
}

json::value object_with_string(std::string_view key, std::string value) {
  return json::object{{key, json::string(value)}};
}

}  // namespace

TEST(CompiledSchemaPattern, MatchesAnywhereInTheStringAndNamesThePatternWhenNot) {
  auto s = compiled(R"({"type": "object", "properties": {
      "zone": {"type": "string", "pattern": "^[A-Z][a-z]+/[A-Za-z_]+$"},
      "word": {"type": "string", "pattern": "b+"}}})");
  ASSERT_TRUE(s);
  EXPECT_EQ(check(*s, R"({"zone": "Europe/Oslo", "word": "abba"})"), "");
  auto error = check(*s, R"({"zone": "europe/oslo"})");
  EXPECT_THAT(error, HasSubstr("at /zone"));
  EXPECT_THAT(error, HasSubstr(R"(does not match the pattern "^[A-Z][a-z]+/[A-Za-z_]+$")"));
  EXPECT_THAT(check(*s, R"({"word": "aaa"})"), HasSubstr("at /word"));
  // A pattern applies to strings only.
  EXPECT_EQ(check(*s, R"({"word": 5})").find("pattern"), std::string::npos);
}

TEST(CompiledSchemaPattern, APatternRe2CannotCompileIsRefusedNamingWhereItIs) {
  EXPECT_THAT(compile_error(R"({"properties": {"s": {"pattern": "("}}})"),
              HasSubstr("the pattern at /properties/s/pattern is not a regular expression"));
  // Backreferences and lookaround make matching exponential; RE2 has neither.
  EXPECT_THAT(compile_error(R"({"properties": {"s": {"pattern": "(a)\\1"}}})"),
              HasSubstr("/properties/s/pattern"));
  EXPECT_THAT(compile_error(R"j({"properties": {"s": {"pattern": "a(?=b)"}}})j"),
              HasSubstr("/properties/s/pattern"));
  EXPECT_THAT(compile_error(R"({"patternProperties": {"(": {}}})"),
              HasSubstr("the pattern at /patternProperties/("));
  EXPECT_THAT(
      compile_error(R"({"definitions": {"d": {"items": [{"anyOf": [{"pattern": "["}]}]}}})"),
      HasSubstr("/definitions/d/items/0/anyOf/0/pattern"));
}

// With valijson's std::regex each of these stopped or hung the process: a recursion per
// character overflowed the stack, and nested quantifiers backtracked exponentially.
TEST(CompiledSchemaPattern, LongInputsAndNestedQuantifiersAreMatchedInLinearTime) {
  auto s = compiled(R"({"type": "object", "properties": {
      "a": {"type": "string", "pattern": "^(a|b)*$"},
      "b": {"type": "string", "pattern": "^(a*)*b$"},
      "d": {"type": "string", "format": "date"}},
      "patternProperties": {"^(x*)*y$": {"type": "integer"}}})");
  ASSERT_TRUE(s);
  EXPECT_EQ(check(*s, json::serialize(object_with_string("a", std::string(1'000'000, 'a')))), "");
  EXPECT_THAT(check(*s, json::serialize(object_with_string("b", std::string(5'000, 'a')))),
              HasSubstr("does not match the pattern"));
  EXPECT_THAT(check(*s, json::serialize(object_with_string("d", std::string(1'000'000, '1')))),
              HasSubstr("is not a valid date"));
  json::object long_name;
  long_name[std::string(100'000, 'x')] = "not an integer";
  EXPECT_EQ(check(*s, json::serialize(long_name)), "");  // no "y": the pattern does not take it
}

TEST(CompiledSchemaPattern, KeywordsAreFoundWhereverASchemaCanBe) {
  auto s = compiled(R"({"type": "object",
      "definitions": {"code": {"type": "string", "pattern": "^[0-9]{3}$"}},
      "properties": {
        "ref": {"$ref": "#/definitions/code"},
        "list": {"type": "array", "items": {"pattern": "^x"}},
        "tuple": {"type": "array", "items": [{"pattern": "^y"}]},
        "any": {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^z"}]},
        "not": {"not": {"pattern": "^n"}},
        "cond": {"if": {"pattern": "^i"}, "then": {"pattern": "t$"}, "else": {"pattern": "e$"}},
        "names": {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}},
        "extra": {"type": "object", "additionalProperties": {"pattern": "^a"}}}})");
  ASSERT_TRUE(s);
  EXPECT_EQ(check(*s, R"({"ref": "123", "list": ["x1"], "tuple": ["y"], "any": "z", "not": "m",
                          "cond": "it", "names": {"ok": 1}, "extra": {"k": "a"}})"),
            "");
  const char* bad[] = {R"({"ref": "12"})",  R"({"list": ["x", "y"]})", R"({"tuple": ["x"]})",
                       R"({"any": "a"})",   R"({"not": "no"})",        R"({"cond": "ie"})",
                       R"({"cond": "et"})", R"({"names": {"Ok": 1}})", R"({"extra": {"k": "b"}})"};
  for (const char* input : bad)
    EXPECT_NE(check(*s, input), "") << input;
}

TEST(CompiledSchemaPattern, ThePropertyNamedPatternIsAPropertyAndConstValuesAreLeftAlone) {
  auto s = compiled(R"({"type": "object", "properties": {
      "pattern": {"type": "string"},
      "format": {"type": "string"},
      "c": {"const": {"pattern": "(", "format": "date"}},
      "e": {"enum": [{"pattern": "x"}]}}})");
  ASSERT_TRUE(s);
  EXPECT_EQ(check(*s, R"({"pattern": "(", "format": "today",
                          "c": {"pattern": "(", "format": "date"}, "e": {"pattern": "x"}})"),
            "");
  EXPECT_NE(check(*s, R"({"c": {"pattern": "(", "format": "2024-01-01"}})"), "");
}

TEST(CompiledSchemaPatternProperties, EachMatchingPatternAndOnlyUnmatchedNamesMeetAdditional) {
  auto s = compiled(R"({"type": "object",
      "properties": {"id": {"type": "string"}},
      "patternProperties": {"^n_": {"type": "integer"}, "_s$": {"type": "string"}},
      "additionalProperties": false})");
  ASSERT_TRUE(s);
  EXPECT_EQ(check(*s, R"({"id": "a", "n_count": 3, "name_s": "x"})"), "");
  EXPECT_THAT(check(*s, R"({"n_count": "3"})"), HasSubstr("at /n_count"));
  // Both patterns take "n_x_s": it must be an integer and a string, which nothing is.
  EXPECT_NE(check(*s, R"({"n_x_s": 1})"), "");
  auto extra = check(*s, R"({"id": "a", "other": 1})");
  EXPECT_THAT(extra, HasSubstr("at /other"));
  EXPECT_THAT(extra, HasSubstr("does not allow"));
}

TEST(CompiledSchemaPatternProperties, AdditionalPropertiesAsASchemaAndRefsInsideResolve) {
  auto s = compiled(R"({"type": "object",
      "definitions": {"pos": {"type": "integer", "minimum": 0},
                      "tree": {"type": "object", "patternProperties": {"^c": {"$ref": "#/definitions/tree"}},
                               "additionalProperties": {"$ref": "#/definitions/pos"}}},
      "properties": {"t": {"$ref": "#/definitions/tree"}},
      "patternProperties": {"^p": {"$ref": "#/definitions/pos"}},
      "additionalProperties": {"type": "boolean"}})");
  ASSERT_TRUE(s);
  EXPECT_EQ(check(*s, R"({"p1": 2, "flag": true, "t": {"c1": {"c2": {"v": 3}}, "v": 1}})"), "");
  EXPECT_THAT(check(*s, R"({"p1": -1})"), HasSubstr("at /p1"));
  EXPECT_THAT(check(*s, R"({"flag": 1})"), HasSubstr("at /flag"));
  EXPECT_THAT(check(*s, R"({"t": {"c1": {"c2": {"v": -3}}}})"), HasSubstr("at /t/c1/c2/v"));
}

TEST(CompiledSchemaFormat, DatesAndTimesAreCheckedAsRfc3339WritesThem) {
  auto s = compiled(R"({"type": "object", "properties": {
      "d": {"format": "date"}, "t": {"format": "time"}, "dt": {"format": "date-time"},
      "e": {"format": "email"}}})");
  ASSERT_TRUE(s);
  for (const char* ok :
       {R"({"d": "2024-02-29"})", R"({"d": "2000-02-29"})", R"({"t": "23:59:60Z"})",
        R"({"t": "08:30:00.25+02:00"})", R"({"dt": "2024-07-18T16:52:45z"})",
        R"({"e": "not checked"})", R"({"d": 20240229})"})
    EXPECT_EQ(check(*s, ok), "") << ok;
  for (const char* bad :
       {R"({"d": "2023-02-29"})", R"({"d": "1900-02-29"})", R"({"d": "2024-04-31"})",
        R"({"d": "2024-1-01"})", R"({"t": "24:00:00Z"})", R"({"t": "08:30:00"})",
        R"({"t": "08:30:00|02:00"})", R"({"dt": "2024-07-18 16:52:45Z"})"})
    EXPECT_THAT(check(*s, bad), HasSubstr("is not a valid")) << bad;
}

TEST(CompiledSchemaPattern, OurOwnKeywordsAndRefsOutsideSchemasAreRefused) {
  EXPECT_THAT(compile_error(R"({"properties": {"s": {"x-switchboard-pattern": "a"}}})"),
              HasSubstr("reserves"));
  // valijson would compile what such a $ref points at as written, std::regex and all.
  EXPECT_THAT(compile_error(R"({"x-extra": {"s": {"pattern": "^(a|b)*$"}},
                                "properties": {"s": {"$ref": "#/x-extra/s"}}})"),
              HasSubstr("the $ref at /properties/s/$ref (\"#/x-extra/s\") points at no schema"));
  // valijson followed these by recursion until the stack ran out.
  EXPECT_THAT(compile_error(R"({"$ref": "object", "type": "object"})"),
              HasSubstr("is not a JSON Pointer into this document"));
  EXPECT_THAT(compile_error(R"({"properties": {"a": {"$ref": "#/definitions/b"}},
                                "definitions": {"b": {"$ref": "#/definitions/c"},
                                                "c": {"$ref": "#/definitions/b"}}})"),
              HasSubstr("applies to itself"));
  EXPECT_THAT(compile_error(R"({"$ref": "#"})"), HasSubstr("the schema at / applies to itself"));
  EXPECT_THAT(compile_error(R"({"type": "object", "allOf": [{"$ref": "#"}]})"),
              HasSubstr("applies to itself"));
  EXPECT_THAT(
      compile_error(R"({"definitions": {"a": {"not": {"anyOf": [{"$ref": "#/definitions/b"}]}},
                                                "b": {"if": {"$ref": "#/definitions/a"}}},
                                "properties": {"x": {"$ref": "#/definitions/a"}}})"),
      HasSubstr("applies to itself"));
  // Recursion through a part of the value ends with the value: a tree of any depth is fine.
  EXPECT_EQ(compile_error(R"({"type": "object", "properties": {"child": {"$ref": "#"}},
                              "anyOf": [{"required": ["child"]}, {"$ref": "#/definitions/leaf"}],
                              "definitions": {"leaf": {"maxProperties": 0}}})"),
            "compiled");
  EXPECT_EQ(compile_error(R"({"$defs": {"s": {"pattern": "^a"}},
                              "properties": {"s": {"$ref": "#/$defs/s/"}}})"),
            "compiled");
}
