#include "config/command.hpp"

#include <gtest/gtest.h>

#include "config/config.hpp"

namespace sb::config {
namespace {

json::object doc(std::string_view text) {
  return parse_json(text).value().as_object();
}

TEST(Commands, ParsesEveryField) {
  auto commands = parse_commands(doc(R"({"command": {
      "review": {"template": "Review $ARGUMENTS", "description": "Reviews", "agent": "plan",
                 "model": "local/m1", "subtask": true},
      "hi": {"template": "Say hi"}}})"));
  ASSERT_TRUE(commands) << commands.error().message;
  ASSERT_EQ(commands->size(), 2u);
  const auto& review = commands->at("review");
  EXPECT_EQ(review.name, "review");
  EXPECT_EQ(review.template_text, "Review $ARGUMENTS");
  EXPECT_EQ(review.description, "Reviews");
  EXPECT_EQ(review.agent, "plan");
  EXPECT_EQ(review.model, "local/m1");
  EXPECT_TRUE(review.subtask);
  const auto& hi = commands->at("hi");
  EXPECT_EQ(hi.description, "");
  EXPECT_FALSE(hi.agent);
  EXPECT_FALSE(hi.model);
  EXPECT_FALSE(hi.subtask);
  EXPECT_TRUE(parse_commands(doc("{}"))->empty());
}

TEST(Commands, BadEntriesNameTheKey) {
  struct Case {
    const char* text;
    const char* error;
  };
  for (const auto& c : std::initializer_list<Case>{
           {R"({"command": []})", "command must be an object"},
           {R"({"command": {"x": "Say hi"}})", "command.x must be an object"},
           {R"({"command": {"x": {}}})", "command.x.template is required"},
           {R"({"command": {"x": {"template": ""}}})", "command.x.template is required"},
           {R"({"command": {"x": {"template": 3}}})", "command.x.template must be a string"},
           {R"({"command": {"x": {"template": "t", "agent": 1}}})", "command.x.agent must be"},
           {R"({"command": {"x": {"template": "t", "model": "m"}}})",
            "command.x.model must be \"PROVIDER/MODEL\", got \"m\""},
           {R"({"command": {"x": {"template": "t", "subtask": "yes"}}})",
            "command.x.subtask must be"},
           {R"({"command": {"a b": {"template": "t"}}})", "command.a b is not a usable"},
       }) {
    auto r = parse_commands(doc(c.text));
    ASSERT_FALSE(r) << c.text;
    EXPECT_NE(r.error().message.find(c.error), std::string::npos)
        << c.text << ": " << r.error().message;
  }
}

TEST(Commands, ConfigReadsThemFromTheMergedFilesAndNamesTheFile) {
  Config cfg;
  ASSERT_TRUE(apply(cfg, parse_json(R"({"command": {"x": {"template": "T $1"}}})").value(), "a"));
  ASSERT_TRUE(apply(cfg, parse_json(R"({"command": {"x": {"description": "D"}}})").value(), "b"));
  ASSERT_EQ(cfg.commands.size(), 1u);
  EXPECT_EQ(cfg.commands.at("x").template_text, "T $1");
  EXPECT_EQ(cfg.commands.at("x").description, "D");
  auto bad = apply(cfg, parse_json(R"({"command": {"y": {"agent": "plan"}}})").value(), "c.json");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "configuration error: c.json: command.y.template is required: the prompt, with "
            "$ARGUMENTS or $1, $2, ... for the arguments");
  Config warned;
  ASSERT_TRUE(apply(warned,
                    parse_json(R"({"command": {"x": {"template": "t", "subtask": true, "variant":
                    "high"}}})")
                        .value(),
                    "w.json"));
  ASSERT_EQ(warned.warnings.size(), 2u);
  EXPECT_EQ(warned.warnings[0], "w.json: unknown key command.x.variant (ignored)");
  EXPECT_EQ(warned.warnings[1],
            "w.json: command.x.subtask is not supported: the command runs in the session itself");
}

TEST(Commands, ArgumentsFillThePlaceholders) {
  // $ARGUMENTS: everything, as written.
  EXPECT_EQ(expand_template("Review $ARGUMENTS now", "src/a.ts  \"b c\""),
            "Review src/a.ts  \"b c\" now");
  EXPECT_EQ(expand_template("$ARGUMENTS|$ARGUMENTS", "x"), "x|x");
  // $N: one word each; quotes group words and are dropped.
  EXPECT_EQ(expand_template("from $1 to $2.", "\"New York\" 'Los Angeles'"),
            "from New York to Los Angeles.");
  // The highest placeholder takes the rest.
  EXPECT_EQ(expand_template("a=$1 b=$2", "one two three four"), "a=one b=two three four");
  EXPECT_EQ(expand_template("$2 then $1", "x y z"), "y z then x");
  // Missing words leave nothing.
  EXPECT_EQ(expand_template("[$1][$2][$3]", "only"), "[only][][]");
  EXPECT_EQ(expand_template("[$1]", ""), "[]");
  // A quote that closes nothing is dropped.
  EXPECT_EQ(expand_template("[$1][$2]", "it\"s x"), "[it][s x]");
  // What the user wrote is not searched for placeholders: an argument of "$ARGUMENTS"s stays as
  // it is (it grew the prompt with the square of its length).
  std::string many;
  for (int i = 0; i < 2000; ++i)
    many += "$ARGUMENTS";
  EXPECT_EQ(expand_template("Review $1", many), "Review " + many);
  EXPECT_EQ(expand_template("Review $ARGUMENTS", many), "Review " + many);
  // Both kinds in one template.
  EXPECT_EQ(expand_template("$1: $ARGUMENTS", "a b"), "a b: a b");
  EXPECT_EQ(expand_template("$1 $2: $ARGUMENTS", "a b"), "a b: a b");
  // No placeholder: the arguments follow after a blank line; none, nothing is added.
  EXPECT_EQ(expand_template("Run the tests.", "fast please"), "Run the tests.\n\nfast please");
  EXPECT_EQ(expand_template("Run the tests.", "  "), "Run the tests.");
  EXPECT_EQ(expand_template("Run the tests.", ""), "Run the tests.");
  // A $ not followed by a digit is text.
  EXPECT_EQ(expand_template("cost $x $ $1", "5"), "cost $x $ 5");
}

TEST(Commands, HintsListThePlaceholdersUsed) {
  EXPECT_EQ(template_hints("no placeholders"), std::vector<std::string>{});
  EXPECT_EQ(template_hints("$ARGUMENTS"), std::vector<std::string>{"$ARGUMENTS"});
  EXPECT_EQ(template_hints("$2 $1 $10 $2 and $ARGUMENTS"),
            (std::vector<std::string>{"$1", "$10", "$2", "$ARGUMENTS"}));
}

}  // namespace
}  // namespace sb::config
