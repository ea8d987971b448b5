// CompiledSchema: the keywords checked with RE2 instead of valijson's std::regex ("pattern",
// "patternProperties", "format"), what they accept and refuse, and inputs that std::regex could
// not survive.
#include "clienttool/schema.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
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

// Every place a schema can be is walked: an unusable pattern there is refused naming the place.
// A place the walk missed would be compiled by valijson with std::regex, and register.
TEST(CompiledSchemaPattern, EveryPlaceASchemaCanBeIsWalked) {
  const std::string bad = R"({"pattern": "("})";
  const std::pair<std::string, std::string> cases[] = {
      {R"({"properties": {"a": B}})", "/properties/a/pattern"},
      {R"({"items": B})", "/items/pattern"},
      {R"({"items": [{}, B]})", "/items/1/pattern"},
      {R"({"additionalItems": B})", "/additionalItems/pattern"},
      {R"({"additionalProperties": B})", "/additionalProperties/pattern"},
      {R"({"contains": B})", "/contains/pattern"},
      {R"({"propertyNames": B})", "/propertyNames/pattern"},
      {R"({"not": B})", "/not/pattern"},
      {R"({"if": B})", "/if/pattern"},
      {R"({"then": B})", "/then/pattern"},
      {R"({"else": B})", "/else/pattern"},
      {R"({"allOf": [B]})", "/allOf/0/pattern"},
      {R"({"anyOf": [{}, B]})", "/anyOf/1/pattern"},
      {R"({"oneOf": [B]})", "/oneOf/0/pattern"},
      {R"({"dependencies": {"a": ["b"], "c": B}})", "/dependencies/c/pattern"},
      {R"({"definitions": {"d": B}})", "/definitions/d/pattern"},
      {R"({"$defs": {"d": B}})", "/$defs/d/pattern"},
      {R"({"patternProperties": {"^x/y": B}})", "/patternProperties/^x~1y/pattern"},
      {R"({"patternProperties": {"^x": {}}, "additionalProperties": B})",
       "/additionalProperties/pattern"},
      {R"({"patternProperties": {"^x": {"patternProperties": {"^y": B}}}})",
       "/patternProperties/^x/patternProperties/^y/pattern"},
  };
  for (const auto& [shape, where] : cases) {
    std::string text = shape;
    text.replace(text.find('B'), 1, bad);
    EXPECT_THAT(compile_error(text), HasSubstr("the pattern at " + where + " is not")) << text;
  }
}

TEST(CompiledSchemaPattern, KeywordsWhereverASchemaCanBeAreMatchedByRe2) {
  auto s = compiled(R"({"type": "object",
      "definitions": {"code": {"type": "string", "pattern": "^[0-9]{3}$"}},
      "properties": {
        "ref": {"$ref": "#/definitions/code"},
        "list": {"type": "array", "items": {"pattern": "^x"}},
        "tuple": {"type": "array", "items": [{"pattern": "^y"}]},
        "any": {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^z"}]},
        "cond": {"if": {"minLength": 2}, "then": {"pattern": "t$"}, "else": {"pattern": "e$"}},
        "extra": {"type": "object", "additionalProperties": {"pattern": "^a"}}}})");
  ASSERT_TRUE(s);
  EXPECT_EQ(check(*s, R"({"ref": "123", "list": ["x1"], "tuple": ["y"], "any": "z",
                          "cond": "it", "extra": {"k": "a"}})"),
            "");
  // Each fails on its pattern, and the message is RE2's constraint's, naming the pattern.
  const std::pair<const char*, const char*> bad[] = {
      {R"({"ref": "12"})", "^[0-9]{3}$"}, {R"({"list": ["x", "y"]})", "^x"},
      {R"({"tuple": ["x"]})", "^y"},      {R"({"cond": "ie"})", "t$"},
      {R"({"cond": "t"})", "e$"},         {R"({"extra": {"k": "b"}})", "^a"}};
  for (const auto& [input, pattern] : bad)
    EXPECT_THAT(check(*s, input),
                HasSubstr(std::string("does not match the pattern \"") + pattern + "\""))
        << input;
  EXPECT_NE(check(*s, R"({"any": "a"})"), "");  // anyOf names its first branch's failure
  auto names = compiled(R"({"propertyNames": {"pattern": "^[a-z]+$"},
                            "properties": {"n": {"not": {"pattern": "^n"}}}})");
  ASSERT_TRUE(names);
  EXPECT_EQ(check(*names, R"({"ok": 1, "n": "m"})"), "");
  EXPECT_NE(check(*names, R"({"Ok": 1})"), "");
  EXPECT_NE(check(*names, R"({"n": "no"})"), "");
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

// What a reviewer found still reaching std::regex or unbounded recursion in valijson, each now
// refused or handled.
TEST(CompiledSchemaRefs, ReferencesResolveAsValijsonResolvesThem) {
  // valijson skips an empty token: this would land on properties.properties.x, never rewritten.
  EXPECT_THAT(compile_error(R"({"properties": {"": {"properties": {"x": {}}},
      "properties": {"x": {"type": "string", "pattern": "^(a|b)*$"}},
      "s": {"$ref": "#/properties//properties/x"}}})"),
              HasSubstr("has an empty reference token"));
  // valijson decodes %XX: "%61" is "a", so this allOf contains itself.
  EXPECT_THAT(compile_error(R"({"definitions": {"a": {"allOf": [{"$ref": "#/definitions/%61"}]},
                                                "%61": {}},
                                "properties": {"x": {"$ref": "#/definitions/a"}}})"),
              HasSubstr("applies to itself"));
  // What generators of schemas from TypeScript types write resolves.
  auto s = compiled(R"({"definitions": {"Record<string,any>": {"type": "object"}},
      "properties": {"r": {"$ref": "#/definitions/Record%3Cstring%2Cany%3E"}}})");
  ASSERT_TRUE(s);
  EXPECT_EQ(check(*s, R"({"r": {}})"), "");
  EXPECT_NE(check(*s, R"({"r": 1})"), "");
  EXPECT_THAT(compile_error(R"({"properties": {"r": {"$ref": "#/definitions/nothing"}}})"),
              HasSubstr("points at nothing"));
}

TEST(CompiledSchemaRefs, AnIdChangesNothing) {
  // valijson resolved "$ref"s against "id": a relative one grew the scope on each visit of "#"
  // until the stack ran out, and a URN's check was a std::regex with a lookahead.
  auto tree = compiled(R"({"type": "object", "id": "a", "properties": {"c": {"$ref": "#"}}})");
  ASSERT_TRUE(tree);
  EXPECT_EQ(check(*tree, R"({"c": {"c": {}}})"), "");
  EXPECT_NE(check(*tree, R"({"c": {"c": 1}})"), "");
  std::string urn = R"({"type": "object", "id": "http://e/", "properties": {"a": {"id": "urn:ab:)" +
                    std::string(100'000, 'a') + R"("}}})";
  EXPECT_EQ(compile_error(urn), "compiled");
  // A property named "id" is a property.
  auto named = compiled(R"({"properties": {"id": {"type": "string"}}, "required": ["id"]})");
  ASSERT_TRUE(named);
  EXPECT_NE(check(*named, R"({"id": 1})"), "");
}

namespace {
// {"definitions": {"d0": f(1), ..., "d{n-1}": f(n), "d{n}": {}}, "properties": {"x": d0}}
std::string chain(int n, const std::function<std::string(int)>& link) {
  std::string defs;
  for (int i = 0; i < n; ++i)
    defs += "\"d" + std::to_string(i) + "\": " + link(i + 1) + ", ";
  return R"({"definitions": {)" + defs + "\"d" + std::to_string(n) +
         R"(": {}}, "properties": {"x": {"$ref": "#/definitions/d0"}}})";
}
std::string ref(int i) {
  return "{\"$ref\": \"#/definitions/d" + std::to_string(i) + "\"}";
}
}  // namespace

TEST(CompiledSchemaRefs, ChainsThatWouldRecurseTooDeepOrTooLongAreRefused) {
  auto all_of = [](int i) { return "{\"allOf\": [" + ref(i) + "]}"; };
  EXPECT_EQ(compile_error(chain(8, all_of)), "compiled");
  EXPECT_THAT(compile_error(chain(100, all_of)), HasSubstr("in a chain"));
  // About 2^(n+2) chains below x: every branch of an allOf is evaluated when the input is valid.
  auto twice = [](int i) { return "{\"allOf\": [" + ref(i) + ", " + ref(i) + "]}"; };
  EXPECT_EQ(compile_error(chain(9, twice)), "compiled");
  EXPECT_THAT(compile_error(chain(12, twice)), HasSubstr("chains of schemas"));
  // Through properties each schema descends into the value, but valijson compiles the chain by
  // recursion all the same.
  auto nested = [](int i) { return "{\"properties\": {\"n\": " + ref(i) + "}}"; };
  EXPECT_EQ(compile_error(chain(100, nested)), "compiled");
  EXPECT_THAT(compile_error(chain(3000, nested)), HasSubstr("nest"));
}

TEST(CompiledSchemaPatternProperties, EmptyAndPercentKeysAndNestingAreTheirOwnPatterns) {
  // The key "" matches every name; "properties" is a pattern here, not a keyword.
  auto s = compiled(R"({"type": "object", "patternProperties": {
      "": {"type": "object"},
      "properties": {"properties": {"x": {"pattern": "^(a*)*b$"}}},
      "^\\d+%$": {"type": "integer"}}})");
  ASSERT_TRUE(s);
  EXPECT_NE(check(*s, R"({"k": 5})"), "");
  EXPECT_THAT(check(*s, json::serialize(json::object{
                            {"the_properties", json::object{{"x", std::string(30, 'a')}}}})),
              HasSubstr("does not match the pattern"));
  EXPECT_EQ(check(*s, R"({"50%": {}})").find("50%") != std::string::npos, true);
  auto nested = compiled(R"({"type": "object", "patternProperties": {
      "^a": {"type": "object", "patternProperties": {"^b": {"type": "integer"}}}},
      "additionalProperties": {"patternProperties": {".*": {"type": "string"}}}})");
  ASSERT_TRUE(nested);
  EXPECT_EQ(check(*nested, R"({"a1": {"b1": 2}, "m": {"k": "v"}})"), "");
  EXPECT_THAT(check(*nested, R"({"a1": {"b1": "x"}})"), HasSubstr("at /a1/b1"));
  EXPECT_THAT(check(*nested, R"({"m": {"k": 1}})"), HasSubstr("at /m/k"));
  std::string many = R"({"patternProperties": {)";
  for (int i = 0; i < 1001; ++i)
    many += (i ? ", " : "") + std::string("\"p") + std::to_string(i) + "\": {}";
  EXPECT_THAT(compile_error(many + "}}"), HasSubstr("more than 1000 patternProperties"));
}

TEST(CompiledSchemaPattern, EcmaSpellingsRe2WritesOtherwiseAreTranslated) {
  auto s = compiled(R"({"properties": {
      "e": {"pattern": "^\\u00e9+$"},
      "y": {"pattern": "^(?<year>[0-9]{4})$"},
      "t": {"then": {"$ref": "#"}}}})");
  ASSERT_TRUE(s);
  EXPECT_EQ(check(*s, R"({"e": "\u00e9\u00e9", "y": "2024"})"), "");
  EXPECT_THAT(check(*s, R"({"e": "e"})"), HasSubstr(R"(does not match the pattern "^\u00e9+$")"));
  EXPECT_NE(check(*s, R"({"y": "24"})"), "");
  EXPECT_THAT(compile_error(R"({"properties": {"s": {"pattern": "(?<=a)b"}}})"),
              HasSubstr("/properties/s/pattern"));
  std::string big = "[ab]{1000}[ab]{1000}[ab]{1000}[ab]{1000}[ab]{1000}[ab]{1000}";
  EXPECT_THAT(compile_error(R"({"properties": {"s": {"pattern": ")" + big + R"("}}})"),
              HasSubstr("is too large"));
}
