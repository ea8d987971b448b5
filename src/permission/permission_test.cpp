#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "permission/doom_loop.hpp"
#include "permission/ruleset.hpp"
#include "permission/service.hpp"
#include "permission/wildcard.hpp"

namespace sb::permission {
namespace {

using namespace std::chrono_literals;

// How long a test waits for something that should happen (much longer than any timeout used).
constexpr auto kWait = 5s;

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

json::value parse(std::string_view text) {
  auto r = parse_json(text);
  EXPECT_TRUE(r.has_value()) << text;
  return r ? *r : json::value();
}

Ruleset rules(std::string_view permission_json) {
  auto r = parse_config(parse(permission_json));
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
  return r ? *r : Ruleset{};
}

// ---- wildcard -----------------------------------------------------------------------------------

TEST(Wildcard, StarMatchesAnyRunOfCharacters) {
  EXPECT_TRUE(wildcard_match("git status", "git *"));
  EXPECT_TRUE(wildcard_match("git commit -m foo", "git *"));
  EXPECT_TRUE(wildcard_match("rm -rf /", "rm -rf *"));
  EXPECT_TRUE(wildcard_match("", "*"));
  EXPECT_TRUE(wildcard_match("anything / at all", "*"));
  EXPECT_TRUE(wildcard_match("xxaxxbxxc", "*a*b*c"));
  EXPECT_FALSE(wildcard_match("xxcxxbxxa", "*a*b*c"));
  EXPECT_TRUE(wildcard_match("git push --force", "git * --force"));
  EXPECT_FALSE(wildcard_match("git push", "git * --force"));
}

TEST(Wildcard, StarCrossesSlashesAndNewlines) {
  // OpenCode's classic matcher: `*` is `.*` with the dot-all flag.
  EXPECT_TRUE(wildcard_match("src/a/b/.env", "*.env"));
  EXPECT_TRUE(wildcard_match("/home/u/project/file.ts", "/home/u/*"));
  EXPECT_TRUE(wildcard_match("echo a\nrm -rf /", "echo *"));
}

TEST(Wildcard, TrailingSpaceStarAlsoMatchesTheBareCommand) {
  EXPECT_TRUE(wildcard_match("git", "git *"));
  EXPECT_TRUE(wildcard_match("ls", "ls *"));
  EXPECT_TRUE(wildcard_match("ls -la", "ls *"));
  // ...but only the bare command, not another command that starts the same way.
  EXPECT_FALSE(wildcard_match("lstmeval", "ls *"));
  EXPECT_FALSE(wildcard_match("gitk", "git *"));
  // Without the space, the star is a plain prefix match.
  EXPECT_TRUE(wildcard_match("ls", "ls*"));
  EXPECT_TRUE(wildcard_match("lstmeval", "ls*"));
  // The rule applies to a trailing " *" only.
  EXPECT_FALSE(wildcard_match("git", "git * --force"));
}

TEST(Wildcard, QuestionMarkIsExactlyOneCharacter) {
  EXPECT_TRUE(wildcard_match("file1.txt", "file?.txt"));
  EXPECT_FALSE(wildcard_match("file12.txt", "file?.txt"));
  EXPECT_FALSE(wildcard_match("file.txt", "file?.txt"));
  EXPECT_TRUE(wildcard_match("/", "?"));
}

TEST(Wildcard, QuestionMarkTakesAWholeUtf8Character) {
  EXPECT_TRUE(wildcard_match("é", "?"));                 // 2 bytes
  EXPECT_TRUE(wildcard_match("日", "?"));                // 3 bytes
  EXPECT_TRUE(wildcard_match("\xF0\x9F\x98\x80", "?"));  // 4 bytes (an emoji)
  EXPECT_FALSE(wildcard_match("é", "??"));
  EXPECT_TRUE(wildcard_match("caf\xC3\xA9!", "caf?!"));
  EXPECT_TRUE(wildcard_match("日本", "*?"));
  EXPECT_FALSE(wildcard_match("日", "*??"));
  // A `*` gives back whole characters when it backtracks, so a `?` never starts mid-character.
  EXPECT_FALSE(wildcard_match("日Qz", "*??Qz"));
  EXPECT_TRUE(wildcard_match("日aQz", "*??Qz"));
}

TEST(Wildcard, InvalidUtf8CountsByteByByteAndNeverFails) {
  EXPECT_TRUE(wildcard_match("\xFF", "?"));
  EXPECT_TRUE(
      wildcard_match("a\xFF\xFE"
                     "c",
                     "a??c"));
  EXPECT_TRUE(wildcard_match("\xC3", "?"));  // a lead byte with nothing after it
  EXPECT_TRUE(wildcard_match("x\xE6\x97", "x*"));
}

TEST(Wildcard, EverythingElseIsLiteralAndTheWholeStringMustMatch) {
  EXPECT_TRUE(wildcard_match("foo+bar", "foo+bar"));
  EXPECT_FALSE(wildcard_match("axb", "a.b"));
  EXPECT_TRUE(wildcard_match("(x)[y]{z}^$|", "(x)[y]{z}^$|"));
  EXPECT_FALSE(wildcard_match("git status", "git"));
  EXPECT_FALSE(wildcard_match("git status", "status"));
  EXPECT_FALSE(wildcard_match("git", "git status"));
  EXPECT_FALSE(wildcard_match("/users/test/file", "/Users/test/*"));  // case-sensitive
}

TEST(Wildcard, BackslashesMatchSlashes) {
  EXPECT_TRUE(wildcard_match("C:/Windows/System32/drivers", "C:\\Windows\\System32\\*"));
  EXPECT_TRUE(wildcard_match("C:\\Windows\\System32\\hosts", "C:/Windows/System32/*"));
}

TEST(Wildcard, PathologicalPatternsFinish) {
  std::string text(20000, 'a');
  EXPECT_FALSE(wildcard_match(text, "*a*a*a*a*a*a*a*b"));
  EXPECT_TRUE(wildcard_match(text + "b", "*a*a*a*a*a*a*a*b"));
}

// ---- config -------------------------------------------------------------------------------------

TEST(ParseConfig, ReadsRulesInDocumentOrder) {
  auto r = parse_config(
      parse(R"({"bash": {"git *": "allow", "*": "ask"}, "edit": "ask", "*": "allow"})"));
  ASSERT_TRUE(r.has_value()) << r.error().message;
  Ruleset want{{"bash", "git *", Action::Allow},
               {"bash", "*", Action::Ask},
               {"edit", "*", Action::Ask},
               {"*", "*", Action::Allow}};
  EXPECT_EQ(*r, want);
}

TEST(ParseConfig, AStringForTheWholeValueIsEveryPermission) {
  auto r = parse_config(json::value("deny"));
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(*r, (Ruleset{{"*", "*", Action::Deny}}));
}

TEST(ParseConfig, NullAndEmptyMeanNoRules) {
  auto a = parse_config(json::value(nullptr));
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(a->empty());
  auto b = parse_config(parse("{}"));
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(b->empty());
}

TEST(ParseConfig, AnUnknownActionNamesTheKey) {
  auto r = parse_config(parse(R"({"edit": "yes"})"));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::InvalidRequest);
  EXPECT_EQ(r.error().message,
            "permission.edit must be \"allow\", \"ask\" or \"deny\", got \"yes\"");
}

TEST(ParseConfig, ABadPatternActionNamesThePattern) {
  auto r = parse_config(parse(R"({"bash": {"git *": "allow", "rm *": 1}})"));
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(Contains(r.error().message, "permission.bash[\"rm *\"] must be"));
  EXPECT_TRUE(Contains(r.error().message, "got number"));
}

TEST(ParseConfig, AWrongValueTypeIsAnError) {
  auto arr = parse_config(parse(R"({"bash": ["git *"]})"));
  ASSERT_FALSE(arr.has_value());
  EXPECT_TRUE(Contains(arr.error().message, "permission.bash must be"));
  EXPECT_TRUE(Contains(arr.error().message, "got array"));

  auto top = parse_config(parse(R"([1])"), "agent.plan.permission");
  ASSERT_FALSE(top.has_value());
  EXPECT_TRUE(Contains(top.error().message, "agent.plan.permission must be"));

  auto bad_whole = parse_config(json::value("sometimes"));
  ASSERT_FALSE(bad_whole.has_value());
  EXPECT_TRUE(Contains(bad_whole.error().message, "got \"sometimes\""));
}

TEST(ParseRules, ReadsOpenCodesPermissionRulesInOrder) {
  auto rules = parse_rules(json::parse(R"([{"permission": "bash", "pattern": "git *",
      "action": "allow"}, {"permission": "edit", "action": "deny"}])"));
  ASSERT_TRUE(rules) << rules.error().message;
  EXPECT_EQ(*rules, (Ruleset{{"bash", "git *", Action::Allow}, {"edit", "*", Action::Deny}}))
      << "an absent pattern is every pattern";
  EXPECT_TRUE(parse_rules(nullptr)->empty());
}

// Every way a rule can be wrong is refused naming the element and field (POST /session answers
// it as a 400), so no rule reaches a session that a later turn cannot read.
TEST(ParseRules, EachWrongFieldIsNamedWithItsIndex) {
  struct Case {
    const char* rules;
    const char* error;
  };
  const std::string long_pattern(kMaxRuleBytes + 1, 'a');
  const Case cases[] = {
      {R"({"permission": "bash"})",
       "permission must be an array of {permission, pattern, action}, got object"},
      {R"([{"permission": "bash", "pattern": 7, "action": "deny"}])",
       "permission[0].pattern must be a string, got number"},
      {R"([{"permission": "bash", "action": "deny"}, {"permission": ["bash"], "action": "deny"}])",
       "permission[1].permission must be a string, got array"},
      {R"([{"pattern": "*", "action": "deny"}])", "permission[0].permission is required"},
      {R"([{"permission": "", "action": "deny"}])", "permission[0].permission must not be empty"},
      {R"([{"permission": "bash", "pattern": "*"}])",
       "permission[0].action must be \"allow\", \"ask\" or \"deny\", got nothing"},
      {R"([{"permission": "bash", "action": "yes"}])",
       "permission[0].action must be \"allow\", \"ask\" or \"deny\", got \"yes\""},
      {R"([{"permission": "bash", "action": 1}])",
       "permission[0].action must be \"allow\", \"ask\" or \"deny\", got number"},
      {R"(["bash"])",
       "permission[0] must be an object {permission, pattern, action}, got \"bash\""},
  };
  for (const auto& c : cases) {
    auto rules = parse_rules(json::parse(c.rules));
    ASSERT_FALSE(rules) << c.rules;
    EXPECT_EQ(rules.error().code, ErrorCode::InvalidRequest);
    EXPECT_EQ(rules.error().message, c.error) << c.rules;
  }
  json::array too_long{
      json::object{{"permission", "bash"}, {"pattern", long_pattern}, {"action", "deny"}}};
  auto over = parse_rules(too_long);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().message, "permission[0].pattern is over 4096 bytes");
  json::array too_many(kMaxSessionRules + 1,
                       json::object{{"permission", "bash"}, {"action", "deny"}});
  ASSERT_FALSE(parse_rules(too_many));
  EXPECT_TRUE(Contains(parse_rules(too_many).error().message, "at most 1000"));
}

TEST(ParseConfig, HomeDirectoryPatternsAreExpanded) {
  const char* old = std::getenv("HOME");
  std::string saved = old ? old : "";
  ::setenv("HOME", "/home/tester", 1);
  auto r = parse_config(
      parse(R"({"read": {"~/secrets/*": "deny", "$HOME/.ssh/*": "deny", "$HOMEWORK": "ask"}})"));
  if (old)
    ::setenv("HOME", saved.c_str(), 1);
  else
    ::unsetenv("HOME");
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].pattern, "/home/tester/secrets/*");
  EXPECT_EQ((*r)[1].pattern, "/home/tester/.ssh/*");
  EXPECT_EQ((*r)[2].pattern, "$HOMEWORK");  // not $HOME followed by a path
}

TEST(ParseConfig, NumericTimeoutIsTheOptionNotARule) {
  json::value v = parse(R"({"timeout": 30000, "bash": "ask"})");
  auto r = parse_config(v);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(*r, (Ruleset{{"bash", "*", Action::Ask}}));
  auto t = parse_timeout(v);
  ASSERT_TRUE(t.has_value()) << t.error().message;
  EXPECT_EQ(*t, 30000ms);
}

TEST(ParseConfig, TimeoutAbsentOrZeroMeansNone) {
  auto absent = parse_timeout(parse(R"({"bash": "ask"})"));
  ASSERT_TRUE(absent.has_value());
  EXPECT_EQ(*absent, 0ms);
  auto zero = parse_timeout(parse(R"({"timeout": 0})"));
  ASSERT_TRUE(zero.has_value());
  EXPECT_EQ(*zero, 0ms);
  auto whole_string = parse_timeout(json::value("ask"));
  ASSERT_TRUE(whole_string.has_value());
  EXPECT_EQ(*whole_string, 0ms);
}

TEST(ParseConfig, BadTimeoutIsAnError) {
  auto negative = parse_timeout(parse(R"({"timeout": -5})"));
  ASSERT_FALSE(negative.has_value());
  EXPECT_TRUE(Contains(negative.error().message, "permission.timeout"));
  auto fraction = parse_timeout(parse(R"({"timeout": 1.5})"));
  ASSERT_FALSE(fraction.has_value());
  EXPECT_TRUE(Contains(fraction.error().message, "permission.timeout must be an integer"));
}

TEST(ParseConfig, ATimeoutToolKeepsItsRule) {
  // A tool may be called "timeout"; a rule for it is a string or object, never a number.
  json::value v = parse(R"({"timeout": "deny"})");
  auto r = parse_config(v);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(*r, (Ruleset{{"timeout", "*", Action::Deny}}));
  auto t = parse_timeout(v);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(*t, 0ms);
}

TEST(Rules, ActionNamesRoundTrip) {
  for (Action a : {Action::Allow, Action::Ask, Action::Deny})
    EXPECT_EQ(parse_action(action_name(a)), a);
  EXPECT_FALSE(parse_action("Allow").has_value());
  EXPECT_EQ(json::serialize(to_json(Rule{"bash", "git *", Action::Allow})),
            R"({"permission":"bash","pattern":"git *","action":"allow"})");
}

// ---- evaluate -----------------------------------------------------------------------------------

TEST(Evaluate, NothingMatchingMeansAsk) {
  Ruleset none;
  EXPECT_EQ(evaluate("bash", "ls", {none}), Action::Ask);
  Ruleset other = rules(R"({"edit": "allow"})");
  EXPECT_EQ(evaluate("bash", "ls", {other}), Action::Ask);
}

TEST(Evaluate, LastMatchWinsWithinALayer) {
  Ruleset specific_last = rules(R"({"bash": {"*": "ask", "git *": "allow"}})");
  EXPECT_EQ(evaluate("bash", "git status", {specific_last}), Action::Allow);
  EXPECT_EQ(evaluate("bash", "rm x", {specific_last}), Action::Ask);
  // The same rules the other way round: the catch-all comes last and decides everything.
  Ruleset catch_all_last = rules(R"({"bash": {"git *": "allow", "*": "ask"}})");
  EXPECT_EQ(evaluate("bash", "git status", {catch_all_last}), Action::Ask);
}

TEST(Evaluate, LastMatchWinsAcrossLayers) {
  Ruleset agent = rules(R"({"bash": "deny", "read": "allow"})");
  Ruleset config = rules(R"({"bash": {"git *": "allow"}})");
  Ruleset session = rules(R"({"bash": {"git push *": "ask"}})");
  EXPECT_EQ(evaluate("bash", "ls", {agent, config, session}), Action::Deny);
  EXPECT_EQ(evaluate("bash", "git status", {agent, config, session}), Action::Allow);
  EXPECT_EQ(evaluate("bash", "git push origin", {agent, config, session}), Action::Ask);
  EXPECT_EQ(evaluate("read", "/etc/hosts", {agent, config, session}), Action::Allow);
  // Order of the layers is what decides, not how specific a rule is.
  EXPECT_EQ(evaluate("bash", "git status", {config, agent}), Action::Deny);

  std::vector<Ruleset> as_vector{agent, config, session};
  EXPECT_EQ(evaluate("bash", "git push origin", as_vector), Action::Ask);
  EXPECT_EQ(evaluate("bash", "ls", as_vector), Action::Deny);
}

TEST(Evaluate, PermissionNamesAreWildcardsToo) {
  Ruleset r = rules(R"({"*": "allow", "mcp_*": "deny"})");
  EXPECT_EQ(evaluate("webfetch", "https://x", {r}), Action::Allow);
  EXPECT_EQ(evaluate("mcp_github", "anything", {r}), Action::Deny);
}

TEST(Evaluate, FindRuleReturnsTheDecidingRule) {
  Ruleset agent = rules(R"({"*": "ask"})");
  Ruleset config = rules(R"({"bash": {"rm *": "deny", "rm -i *": "ask"}})");
  const Rule* rule = find_rule("bash", "rm -rf /", {agent, config});
  ASSERT_NE(rule, nullptr);
  EXPECT_EQ(*rule, (Rule{"bash", "rm *", Action::Deny}));
  EXPECT_EQ(find_rule("bash", "ls", {config}), nullptr);
}

TEST(Tools, PermissionForTool) {
  EXPECT_EQ(permission_for_tool("edit"), "edit");
  EXPECT_EQ(permission_for_tool("write"), "edit");
  EXPECT_EQ(permission_for_tool("patch"), "edit");
  EXPECT_EQ(permission_for_tool("multiedit"), "edit");
  EXPECT_EQ(permission_for_tool("read"), "read");
  EXPECT_EQ(permission_for_tool("bash"), "bash");
  EXPECT_EQ(permission_for_tool("webfetch"), "webfetch");
  EXPECT_EQ(permission_for_tool("client_app_pick_color", true), "client_tools");
}

TEST(Disabled, AToolIsHiddenWhenItsLastRuleDeniesEverything) {
  Ruleset r = rules(R"({"bash": "deny"})");
  EXPECT_TRUE(disabled("bash", {r}));
  EXPECT_FALSE(disabled("read", {r}));
}

TEST(Disabled, APartialDenyKeepsTheToolVisible) {
  Ruleset some = rules(R"({"bash": {"*": "deny", "git *": "allow"}})");
  EXPECT_FALSE(disabled("bash", {some}));
  // Last match wins: with the catch-all deny last, even "git status" is denied, so hide it.
  Ruleset all = rules(R"({"bash": {"git *": "allow", "*": "deny"}})");
  EXPECT_TRUE(disabled("bash", {all}));
  Ruleset only_rm = rules(R"({"bash": {"rm *": "deny"}})");
  EXPECT_FALSE(disabled("bash", {only_rm}));
}

TEST(Disabled, EditDenialHidesEveryEditingTool) {
  Ruleset r = rules(R"({"edit": "deny"})");
  EXPECT_TRUE(disabled("edit", {r}));
  EXPECT_TRUE(disabled("write", {r}));
  EXPECT_TRUE(disabled("patch", {r}));
  EXPECT_FALSE(disabled("read", {r}));
}

TEST(Disabled, LaterLayersCanBringAToolBack) {
  Ruleset agent = rules(R"({"*": "deny"})");
  Ruleset config = rules(R"({"read": "allow", "bash": "ask"})");
  EXPECT_TRUE(disabled("grep", {agent, config}));
  EXPECT_FALSE(disabled("read", {agent, config}));
  EXPECT_FALSE(disabled("bash", {agent, config}));
  Ruleset none;
  EXPECT_FALSE(disabled("bash", {none}));
}

TEST(Disabled, ClientToolsAreGatedTogether) {
  Ruleset r = rules(R"({"client_tools": "deny"})");
  EXPECT_TRUE(disabled("client_app_pick_color", {r}, true));
  EXPECT_FALSE(disabled("client_app_pick_color", {r}, false));
}

// ---- doom loop ----------------------------------------------------------------------------------

RecentCall call(std::string tool, std::string_view input, bool pending = false) {
  return RecentCall{std::move(tool), parse(input), pending};
}

TEST(DoomLoop, ThirdIdenticalCallInARowTrips) {
  std::vector<RecentCall> h{call("read", R"({"filePath": "a.ts"})"),
                            call("read", R"({"filePath": "a.ts"})")};
  EXPECT_FALSE(is_doom_loop(h, "read", parse(R"({"filePath": "a.ts"})")));
  h.push_back(call("read", R"({"filePath": "a.ts"})"));
  EXPECT_TRUE(is_doom_loop(h, "read", parse(R"({"filePath": "a.ts"})")));
}

TEST(DoomLoop, OnlyTheLastCallsCount) {
  std::vector<RecentCall> h{
      call("bash", R"({"command": "ls"})"), call("read", R"({"filePath": "a.ts"})"),
      call("read", R"({"filePath": "a.ts"})"), call("read", R"({"filePath": "a.ts"})")};
  EXPECT_TRUE(is_doom_loop(h, "read", parse(R"({"filePath": "a.ts"})")));
  h.push_back(call("bash", R"({"command": "ls"})"));
  EXPECT_FALSE(is_doom_loop(h, "read", parse(R"({"filePath": "a.ts"})")));
}

TEST(DoomLoop, ADifferenceBreaksTheStreak) {
  json::value in = parse(R"({"filePath": "a.ts"})");
  std::vector<RecentCall> other_input{call("read", R"({"filePath": "a.ts"})"),
                                      call("read", R"({"filePath": "b.ts"})"),
                                      call("read", R"({"filePath": "a.ts"})")};
  EXPECT_FALSE(is_doom_loop(other_input, "read", in));
  std::vector<RecentCall> other_tool{call("read", R"({"filePath": "a.ts"})"),
                                     call("list", R"({"filePath": "a.ts"})"),
                                     call("read", R"({"filePath": "a.ts"})")};
  EXPECT_FALSE(is_doom_loop(other_tool, "read", in));
  std::vector<RecentCall> asked_about_other{call("read", R"({"filePath": "a.ts"})"),
                                            call("read", R"({"filePath": "a.ts"})"),
                                            call("read", R"({"filePath": "a.ts"})")};
  EXPECT_FALSE(is_doom_loop(asked_about_other, "read", parse(R"({"filePath": "c.ts"})")));
  EXPECT_FALSE(is_doom_loop(asked_about_other, "grep", in));
}

TEST(DoomLoop, PendingCallsDoNotCount) {
  std::vector<RecentCall> h{call("read", R"({"filePath": "a.ts"})"),
                            call("read", R"({"filePath": "a.ts"})", true),
                            call("read", R"({"filePath": "a.ts"})")};
  EXPECT_FALSE(is_doom_loop(h, "read", parse(R"({"filePath": "a.ts"})")));
}

TEST(DoomLoop, KeyOrderDoesNotMatterButValuesDo) {
  std::vector<RecentCall> h{call("grep", R"({"pattern": "x", "path": "src"})"),
                            call("grep", R"({"path": "src", "pattern": "x"})"),
                            call("grep", R"({"pattern": "x", "path": "src"})")};
  EXPECT_TRUE(is_doom_loop(h, "grep", parse(R"({"path": "src", "pattern": "x"})")));
  EXPECT_FALSE(is_doom_loop(h, "grep", parse(R"({"path": "src", "pattern": "y"})")));
}

TEST(DoomLoop, Threshold) {
  json::value in = parse(R"({"a": 1})");
  std::vector<RecentCall> h{call("t", R"({"a": 1})"), call("t", R"({"a": 1})")};
  EXPECT_TRUE(is_doom_loop(h, "t", in, 2));
  EXPECT_FALSE(is_doom_loop(h, "t", in, 3));
  EXPECT_FALSE(is_doom_loop(h, "t", in, 0));
  EXPECT_FALSE(is_doom_loop({}, "t", in));
}

// ---- the service --------------------------------------------------------------------------------

// The service runs on the test's io_context, on the test's own thread, as the server runs it on
// its one executor: a helper that waits for something runs the context until it has happened (or
// `limit` has passed). The context keeps a work guard, so running it for a while really waits.
bool run_until(boost::asio::io_context& io, const std::function<bool()>& done,
               std::chrono::milliseconds limit = kWait) {
  auto deadline = Clock::now() + limit;
  while (!done() && Clock::now() < deadline)
    io.run_one_until(deadline);
  return done();
}

// Records every outcome an ask's handler receives, so a test can wait for the first and check
// that there was exactly one.
class Outcome {
 public:
  explicit Outcome(boost::asio::io_context& io) : io_(&io) {}

  // A completion handler for async_ask.
  auto handler() const {
    return [outcomes = outcomes_](AskOutcome outcome) { outcomes->push_back(std::move(outcome)); };
  }
  // The first outcome, running the context until there is one (or `timeout` has passed).
  std::optional<AskOutcome> wait(std::chrono::milliseconds timeout = kWait) const {
    if (!run_until(
            *io_, [this] { return !outcomes_->empty(); }, timeout))
      return std::nullopt;
    return outcomes_->front();
  }
  std::size_t count() const { return outcomes_->size(); }
  // The rejection this ask ended with; fails the test when it was allowed or has not ended.
  Rejection rejection() const {
    auto o = wait();
    EXPECT_TRUE(o.has_value()) << "the ask did not end";
    if (!o) return {};
    EXPECT_TRUE(o->has_error()) << "the ask was allowed";
    return o->has_error() ? o->error() : Rejection{};
  }
  bool allowed() const {
    auto o = wait();
    return o && o->has_value();
  }

 private:
  boost::asio::io_context* io_;
  std::shared_ptr<std::vector<AskOutcome>> outcomes_ = std::make_shared<std::vector<AskOutcome>>();
};

// Every event published on the bus.
class EventLog {
 public:
  EventLog(const std::shared_ptr<bus::EventBus>& bus, boost::asio::io_context& io)
      : io_(&io),
        subscription_(bus->subscribe([this](const bus::EventPtr& e) { events_.push_back(e); })) {}

  std::vector<json::object> of_type(std::string_view type) const {
    std::vector<json::object> out;
    for (auto& e : events_)
      if (e->type == type) out.push_back(e->properties);
    return out;
  }
  // Properties of the `permission.replied` event for `request_id`, running the context until it
  // is published.
  std::optional<json::object> replied(const std::string& request_id) const {
    std::optional<json::object> found;
    run_until(*io_, [&] {
      for (auto& e : events_)
        if (e->type == "permission.replied" &&
            e->properties.at("requestID") == json::value(request_id)) {
          found = e->properties;
          return true;
        }
      return false;
    });
    return found;
  }
  std::size_t replied_count(const std::string& request_id) const {
    std::size_t n = 0;
    for (auto& p : of_type("permission.replied"))
      if (p.at("requestID") == json::value(request_id)) ++n;
    return n;
  }

 private:
  boost::asio::io_context* io_;
  std::vector<bus::EventPtr> events_;
  bus::Subscription subscription_;  // last: unsubscribes before the rest goes away
};

AskParams bash(std::string session, std::vector<std::string> patterns,
               std::vector<std::string> always = {}) {
  AskParams p;
  p.session_id = std::move(session);
  p.permission = "bash";
  p.patterns = std::move(patterns);
  p.always = std::move(always);
  return p;
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { restart({}); }
  void TearDown() override {
    service_.reset();
    io_.poll();  // the handlers the service posted as it went
  }

  void restart(PermissionOptions options) {
    service_ = PermissionService::create(io_.get_executor(), bus_, options);
  }

  // Asks with `layers` (the config by default); `out` records the outcome.
  void ask(AskParams p, const Outcome& out, RulesetRefs layers) {
    Layers refs;
    for (const auto& layer : layers)
      refs.push_back(&layer.get());
    service_->async_ask(std::move(p), std::move(refs), out.handler());
  }
  void ask(AskParams p, const Outcome& out) { ask(std::move(p), out, {config_}); }

  // Starts an ask that must wait, and returns its id (that of its `permission.asked` event).
  std::string ask_waiting(AskParams p, const Outcome& out, RulesetRefs layers) {
    std::size_t before = events_.of_type("permission.asked").size();
    ask(std::move(p), out, layers);
    auto asked = events_.of_type("permission.asked");
    io_.poll();
    EXPECT_EQ(out.count(), 0u) << "the ask was decided at once";
    EXPECT_EQ(asked.size(), before + 1) << "the ask was not published";
    if (asked.size() != before + 1) return "";
    return std::string(asked.back().at("id").as_string());
  }
  std::string ask_waiting(AskParams p, const Outcome& out) {
    return ask_waiting(std::move(p), out, {config_});
  }

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_ =
      boost::asio::make_work_guard(io_);
  std::shared_ptr<bus::EventBus> bus_ = bus::EventBus::create();
  EventLog events_{bus_, io_};
  std::shared_ptr<PermissionService> service_;
  Ruleset config_ = rules(R"({"bash": {"*": "ask", "ls *": "allow", "rm *": "deny"}})");
};

TEST_F(ServiceTest, AllowedPatternsAreAllowedAtOnce) {
  Outcome out(io_);
  ask(bash("ses_1", {"ls -la", "ls"}), out);
  EXPECT_TRUE(service_->list().empty());
  EXPECT_EQ(out.count(), 0u);  // posted, never run inside async_ask
  io_.poll();
  ASSERT_EQ(out.count(), 1u);  // nobody had to answer
  EXPECT_TRUE(out.allowed());
  EXPECT_TRUE(events_.of_type("permission.asked").empty());
}

TEST_F(ServiceTest, ADeniedPatternFailsAtOnceNamingPermissionAndPattern) {
  Outcome out(io_);
  ask(bash("ses_1", {"rm -rf /"}), out);
  EXPECT_TRUE(service_->list().empty());
  io_.poll();
  ASSERT_EQ(out.count(), 1u);
  Rejection r = out.rejection();
  EXPECT_EQ(r.kind, Rejection::Kind::Denied);
  EXPECT_TRUE(Contains(r.message, "bash"));
  EXPECT_TRUE(Contains(r.message, "`rm -rf /`"));
  EXPECT_TRUE(Contains(r.message, R"("rm *": "deny")"));
  ASSERT_TRUE(r.rule.has_value());
  EXPECT_EQ(*r.rule, (Rule{"bash", "rm *", Action::Deny}));
  EXPECT_EQ(r.error().code, ErrorCode::Forbidden);
  EXPECT_EQ(r.error().message, r.message);
  EXPECT_FALSE(r.halts_turn());  // the model sees the rule and can do something else
  EXPECT_TRUE(service_->list().empty());
  EXPECT_TRUE(events_.of_type("permission.asked").empty());
}

TEST_F(ServiceTest, ADenyAnywhereWinsOverAnAsk) {
  Outcome out(io_);
  ask(bash("ses_1", {"echo hi", "rm -rf /", "ls"}), out);
  io_.poll();
  ASSERT_EQ(out.count(), 1u);
  Rejection r = out.rejection();
  EXPECT_EQ(r.kind, Rejection::Kind::Denied);
  EXPECT_EQ(r.patterns, std::vector<std::string>{"rm -rf /"});
  EXPECT_TRUE(service_->list().empty());
}

// decide() is the rules alone: what they settle, and nullopt when a person must; nothing is
// listed or published either way.
TEST_F(ServiceTest, DecideSaysWhatTheRulesSettleWithoutAsking) {
  Layers layers{&config_};
  auto allowed = service_->decide(bash("ses_1", {"ls -la"}), layers);
  ASSERT_TRUE(allowed.has_value());
  EXPECT_TRUE(allowed->has_value());
  auto denied = service_->decide(bash("ses_1", {"echo hi", "rm -rf /"}), layers);
  ASSERT_TRUE(denied.has_value());
  ASSERT_FALSE(denied->has_value());
  EXPECT_EQ(denied->error().kind, Rejection::Kind::Denied);
  EXPECT_FALSE(service_->decide(bash("ses_1", {"git push"}), layers).has_value())
      << "a person decides";
  EXPECT_TRUE(service_->list().empty());
  EXPECT_TRUE(events_.of_type("permission.asked").empty());
}

// async_ask awaited by a coroutine, as the session awaits it: listed while it waits, and the
// person's answer (here "always", which decide() then knows) ends it.
TEST_F(ServiceTest, AnAwaitedAskEndsWithThePersonsAnswer) {
  std::optional<AskOutcome> outcome;
  boost::asio::co_spawn(
      io_,
      [service = service_, layers = Layers{&config_}]() -> boost::asio::awaitable<AskOutcome> {
        auto p = bash("ses_1", {"git push"}, {"git push *"});
        co_return co_await service->async_ask(std::move(p), layers, boost::asio::use_awaitable);
      },
      [&](std::exception_ptr, AskOutcome o) { outcome = std::move(o); });
  ASSERT_TRUE(run_until(io_, [&] { return !service_->list().empty(); }));
  ASSERT_EQ(service_->list().size(), 1u);
  ASSERT_TRUE(service_->reply(service_->list()[0].id, Reply::Always));
  ASSERT_TRUE(run_until(io_, [&] { return outcome.has_value(); }));
  EXPECT_TRUE(outcome->has_value());
  Layers layers{&config_};
  auto later = service_->decide(bash("ses_1", {"git push origin"}), layers);
  ASSERT_TRUE(later.has_value()) << "the session's approval settles it now";
  EXPECT_TRUE(later->has_value());
}

TEST_F(ServiceTest, AnAwaitedAskIsCancelledWithItsSession) {
  std::optional<AskOutcome> outcome;
  boost::asio::co_spawn(
      io_,
      [service = service_, layers = Layers{&config_}]() -> boost::asio::awaitable<AskOutcome> {
        auto p = bash("ses_1", {"git push"});
        co_return co_await service->async_ask(std::move(p), layers, boost::asio::use_awaitable);
      },
      [&](std::exception_ptr, AskOutcome o) { outcome = std::move(o); });
  ASSERT_TRUE(run_until(io_, [&] { return !service_->list().empty(); }));
  ASSERT_EQ(service_->cancel_session("ses_1", "aborted by the user"), 1u);
  ASSERT_TRUE(run_until(io_, [&] { return outcome.has_value(); }));
  ASSERT_FALSE(outcome->has_value());
  EXPECT_EQ(outcome->error().kind, Rejection::Kind::Cancelled);
}

TEST_F(ServiceTest, AnAskWaitsAndIsPublished) {
  Outcome out(io_);
  AskParams p = bash("ses_1", {"git push"}, {"git push *"});
  p.message_id = "msg_1";
  p.call_id = "call_1";
  p.metadata = json::object{{"command", "git push"}};
  std::string id = ask_waiting(std::move(p), out);
  EXPECT_TRUE(id.starts_with("per_")) << id;

  auto asked = events_.of_type("permission.asked");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(json::value(asked[0]), parse(R"({"id": ")" + id + R"(", "sessionID": "ses_1",
      "permission": "bash", "patterns": ["git push"], "metadata": {"command": "git push"},
      "always": ["git push *"], "tool": {"messageID": "msg_1", "callID": "call_1"}})"));

  auto listed = service_->list();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(json::value(to_json(listed[0])), json::value(asked[0]));
  EXPECT_EQ(service_->pending_count(), 1u);
  EXPECT_EQ(out.count(), 0u);
}

TEST_F(ServiceTest, AnAskWithoutAToolCallHasNoToolField) {
  Outcome out(io_);
  ask_waiting(bash("ses_1", {"make"}), out);
  auto asked = events_.of_type("permission.asked");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_FALSE(asked[0].contains("tool"));
  // Without `always`, an "always" reply would approve the patterns themselves.
  EXPECT_EQ(asked[0].at("always"), parse(R"(["make"])"));
}

TEST_F(ServiceTest, NoPatternsMeansEverythingNotNothing) {
  Ruleset only_git = rules(R"({"bash": {"git *": "allow"}})");
  Outcome waits(io_);
  ask_waiting(bash("ses_1", {}), waits, {only_git});
  auto asked = events_.of_type("permission.asked");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].at("patterns"), parse(R"(["*"])"));
  Ruleset all = rules(R"({"bash": "allow"})");
  Outcome allowed(io_);
  ask(bash("ses_1", {}), allowed, {all});
  EXPECT_TRUE(allowed.allowed());
  EXPECT_EQ(service_->list().size(), 1u);  // only the first waits
}

TEST_F(ServiceTest, ReplyOnceAllowsThisCallOnly) {
  Outcome out(io_);
  std::string id = ask_waiting(bash("ses_1", {"make"}), out);
  ASSERT_TRUE(service_->reply(id, Reply::Once).has_value());
  EXPECT_TRUE(out.allowed());
  auto replied = events_.replied(id);
  ASSERT_TRUE(replied.has_value());
  EXPECT_EQ(json::value(*replied),
            parse(R"({"sessionID": "ses_1", "requestID": ")" + id + R"(", "reply": "once"})"));
  EXPECT_TRUE(service_->list().empty());
  EXPECT_TRUE(service_->session_rules("ses_1").empty());

  Outcome again(io_);
  ask_waiting(bash("ses_1", {"make"}), again);  // still asks next time
}

TEST_F(ServiceTest, ASecondReplyIsNotFoundAndTheHandlerRunsOnce) {
  Outcome out(io_);
  std::string id = ask_waiting(bash("ses_1", {"make"}), out);
  ASSERT_TRUE(service_->reply(id, Reply::Once).has_value());
  auto second = service_->reply(id, Reply::Reject);
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code, ErrorCode::NotFound);
  EXPECT_TRUE(Contains(second.error().message, id));
  EXPECT_TRUE(out.allowed());
  io_.poll();
  EXPECT_EQ(out.count(), 1u);
  EXPECT_EQ(events_.replied_count(id), 1u);
}

TEST_F(ServiceTest, ReplyToAnUnknownIdIsNotFound) {
  auto r = service_->reply("per_nope", Reply::Once);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::NotFound);
}

TEST_F(ServiceTest, RejectWithoutMessageHaltsTheTurn) {
  Outcome out(io_);
  std::string id = ask_waiting(bash("ses_1", {"rmdir /tmp/x"}), out);
  ASSERT_TRUE(service_->reply(id, Reply::Reject).has_value());
  Rejection r = out.rejection();
  EXPECT_EQ(r.kind, Rejection::Kind::Rejected);
  EXPECT_EQ(r.message, "The user rejected permission to use bash for `rmdir /tmp/x`.");
  EXPECT_FALSE(r.feedback.has_value());
  EXPECT_TRUE(r.halts_turn());
  EXPECT_EQ(r.error().code, ErrorCode::Forbidden);
  auto replied = events_.replied(id);
  ASSERT_TRUE(replied.has_value());
  EXPECT_EQ(replied->at("reply"), "reject");
}

TEST_F(ServiceTest, RejectWithMessageGivesTheModelGuidance) {
  Outcome out(io_);
  std::string id = ask_waiting(bash("ses_1", {"rmdir /tmp/x"}), out);
  ASSERT_TRUE(service_->reply(id, Reply::Reject, "use trash-put instead").has_value());
  Rejection r = out.rejection();
  EXPECT_EQ(r.kind, Rejection::Kind::Rejected);
  EXPECT_EQ(r.feedback, "use trash-put instead");
  EXPECT_TRUE(Contains(r.message, "The user rejected permission to use bash for `rmdir /tmp/x`"));
  EXPECT_TRUE(Contains(r.message, "use trash-put instead"));
  EXPECT_FALSE(r.halts_turn());  // the model goes on with the person's guidance
}

TEST_F(ServiceTest, RejectEndsEveryOtherAskOfTheSession) {
  Outcome a(io_), b(io_), other(io_);
  std::string ida = ask_waiting(bash("ses_1", {"make"}), a);
  std::string idb = ask_waiting(bash("ses_1", {"make install"}), b);
  std::string ido = ask_waiting(bash("ses_2", {"make"}), other);
  ASSERT_TRUE(service_->reply(ida, Reply::Reject, "no").has_value());
  EXPECT_EQ(a.rejection().feedback, "no");
  Rejection rb = b.rejection();
  EXPECT_EQ(rb.kind, Rejection::Kind::Rejected);
  EXPECT_FALSE(rb.feedback.has_value());
  EXPECT_TRUE(Contains(rb.message, "`make install`"));
  auto replied_b = events_.replied(idb);
  ASSERT_TRUE(replied_b.has_value());
  EXPECT_EQ(replied_b->at("reply"), "reject");
  // Another session is not affected.
  io_.poll();
  EXPECT_EQ(other.count(), 0u);
  auto left = service_->list();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].id, ido);
}

TEST_F(ServiceTest, AlwaysApprovesThePatternForTheRestOfTheSession) {
  Outcome first(io_);
  std::string id = ask_waiting(bash("ses_1", {"git push origin"}, {"git push *"}), first);
  ASSERT_TRUE(service_->reply(id, Reply::Always).has_value());
  EXPECT_TRUE(first.allowed());
  EXPECT_EQ(events_.replied(id)->at("reply"), "always");
  EXPECT_EQ(service_->session_rules("ses_1"), (Ruleset{{"bash", "git push *", Action::Allow}}));

  Outcome later(io_);
  ask(bash("ses_1", {"git push upstream"}), later);
  EXPECT_TRUE(service_->list().empty()) << "the approval did not settle it";
  EXPECT_TRUE(later.allowed());
  // Only what was approved, only in that session.
  Outcome unrelated(io_), other_session(io_);
  ask_waiting(bash("ses_1", {"git reset --hard"}), unrelated);
  ask_waiting(bash("ses_2", {"git push upstream"}), other_session);
  EXPECT_TRUE(service_->session_rules("ses_2").empty());
}

TEST_F(ServiceTest, AlwaysWithoutAlwaysPatternsApprovesThePatterns) {
  Outcome out(io_);
  std::string id = ask_waiting(bash("ses_1", {"make test"}), out);
  ASSERT_TRUE(service_->reply(id, Reply::Always).has_value());
  EXPECT_EQ(service_->session_rules("ses_1"), (Ruleset{{"bash", "make test", Action::Allow}}));
  Outcome same(io_), different(io_);
  ask(bash("ses_1", {"make test"}), same);
  EXPECT_TRUE(service_->list().empty());
  EXPECT_TRUE(same.allowed());
  ask_waiting(bash("ses_1", {"make clean"}), different);
}

TEST_F(ServiceTest, AlwaysSettlesOtherWaitingAsksItNowAllows) {
  Outcome a(io_), b(io_), c(io_), d(io_), e(io_);
  std::string ida = ask_waiting(bash("ses_1", {"git status"}, {"git *"}), a);
  std::string idb = ask_waiting(bash("ses_1", {"git log", "git diff"}), b);
  std::string idc = ask_waiting(bash("ses_1", {"git log", "make"}), c);  // make is not approved
  AskParams edit;
  edit.session_id = "ses_1";
  edit.permission = "edit";
  edit.patterns = {"git status"};
  std::string idd = ask_waiting(std::move(edit), d);  // another permission
  std::string ide = ask_waiting(bash("ses_2", {"git log"}), e);

  ASSERT_TRUE(service_->reply(ida, Reply::Always).has_value());
  EXPECT_TRUE(a.allowed());
  EXPECT_TRUE(b.allowed());
  EXPECT_EQ(events_.replied(idb)->at("reply"), "always");
  io_.poll();
  EXPECT_EQ(c.count(), 0u);
  EXPECT_EQ(d.count(), 0u);
  EXPECT_EQ(e.count(), 0u);
  std::vector<std::string> left;
  for (auto& r : service_->list())
    left.push_back(r.id);
  EXPECT_EQ(left, (std::vector<std::string>{idc, idd, ide}));
}

TEST_F(ServiceTest, AlwaysReevaluatesWithTheAsksOwnRules) {
  // "ls" was allowed by the config when asked; only "make" needed the person. After "always"
  // for make elsewhere, the ask is fully allowed.
  Outcome first(io_), both(io_);
  std::string id1 = ask_waiting(bash("ses_1", {"make"}), first);
  ask_waiting(bash("ses_1", {"ls", "make"}), both);
  ASSERT_TRUE(service_->reply(id1, Reply::Always).has_value());
  EXPECT_TRUE(both.allowed());
}

TEST_F(ServiceTest, ApprovedRulesAreLayeredLast) {
  Outcome out(io_);
  std::string id = ask_waiting(bash("ses_1", {"anything"}, {"*"}), out);
  ASSERT_TRUE(service_->reply(id, Reply::Always).has_value());
  // The person's "always allow bash *" outranks the config's deny for rm, as in OpenCode.
  Outcome rm(io_);
  ask(bash("ses_1", {"rm -rf build"}), rm);
  EXPECT_TRUE(service_->list().empty());
  EXPECT_TRUE(rm.allowed());
  Ruleset approved = service_->session_rules("ses_1");
  EXPECT_EQ(evaluate("bash", "rm -rf build", {config_, approved}), Action::Allow);
  Ruleset deny_bash = rules(R"({"bash": "deny"})");
  EXPECT_FALSE(disabled("bash", {deny_bash, approved}));
}

TEST_F(ServiceTest, AskTimesOutWithARejection) {
  restart({.timeout = 50ms});
  Outcome out(io_);
  std::string id = ask_waiting(bash("ses_1", {"make"}), out);
  Rejection r = out.rejection();
  EXPECT_EQ(r.kind, Rejection::Kind::TimedOut);
  EXPECT_TRUE(Contains(r.message, "bash for `make`"));
  EXPECT_TRUE(Contains(r.message, "nobody answered within 50 ms"));
  EXPECT_TRUE(r.halts_turn());
  EXPECT_EQ(r.error().code, ErrorCode::Timeout);
  auto replied = events_.replied(id);
  ASSERT_TRUE(replied.has_value());
  EXPECT_EQ(replied->at("reply"), "reject");
  EXPECT_TRUE(service_->list().empty());
  EXPECT_EQ(service_->reply(id, Reply::Once).error().code, ErrorCode::NotFound);
  io_.poll();
  EXPECT_EQ(out.count(), 1u);
}

TEST_F(ServiceTest, PerAskTimeoutOverridesTheDefault) {
  Outcome forever(io_), short_one(io_);
  ask_waiting(bash("ses_1", {"make"}), forever);  // default: no timeout
  AskParams p = bash("ses_2", {"make"});
  p.timeout = 30ms;
  ask_waiting(std::move(p), short_one);
  EXPECT_EQ(short_one.rejection().kind, Rejection::Kind::TimedOut);
  io_.run_for(100ms);
  EXPECT_EQ(forever.count(), 0u);
  EXPECT_EQ(service_->pending_count(), 1u);
}

TEST_F(ServiceTest, AnEarlierDeadlineRearmsTheTimer) {
  restart({.timeout = 10s});
  Outcome slow(io_), fast(io_);
  ask_waiting(bash("ses_1", {"make"}), slow);
  io_.run_for(50ms);  // the timer waits for the 10 s deadline
  AskParams p = bash("ses_2", {"make"});
  p.timeout = 30ms;
  ask_waiting(std::move(p), fast);
  auto o = fast.wait(2s);  // far less than the first ask's 10 s
  ASSERT_TRUE(o.has_value()) << "the later, shorter deadline did not fire";
  EXPECT_EQ(o->error().kind, Rejection::Kind::TimedOut);
  EXPECT_EQ(slow.count(), 0u);
}

TEST_F(ServiceTest, AReplyBeforeTheTimeoutWinsAndTheTimerDoesNothing) {
  restart({.timeout = 300ms});
  Outcome out(io_);
  std::string id = ask_waiting(bash("ses_1", {"make"}), out);
  ASSERT_TRUE(service_->reply(id, Reply::Once).has_value());
  io_.run_for(600ms);  // past the deadline the reply cleared
  EXPECT_EQ(out.count(), 1u);
  EXPECT_TRUE(out.allowed());
  EXPECT_EQ(events_.replied_count(id), 1u);
}

TEST_F(ServiceTest, CancelSessionRejectsItsAsks) {
  Outcome a(io_), b(io_), other(io_);
  std::string ida = ask_waiting(bash("ses_1", {"make"}), a);
  ask_waiting(bash("ses_1", {"make install"}), b);
  std::string ido = ask_waiting(bash("ses_2", {"make"}), other);
  EXPECT_EQ(service_->cancel_session("ses_1"), 2u);
  Rejection r = a.rejection();
  EXPECT_EQ(r.kind, Rejection::Kind::Cancelled);
  EXPECT_TRUE(Contains(r.message, "the session was aborted"));
  EXPECT_TRUE(r.halts_turn());
  EXPECT_EQ(r.error().code, ErrorCode::Unavailable);
  EXPECT_EQ(b.rejection().kind, Rejection::Kind::Cancelled);
  EXPECT_EQ(events_.replied(ida)->at("reply"), "reject");
  io_.poll();
  EXPECT_EQ(other.count(), 0u);
  ASSERT_EQ(service_->list().size(), 1u);
  EXPECT_EQ(service_->list()[0].id, ido);
  EXPECT_EQ(service_->cancel_session("ses_1"), 0u);
}

TEST_F(ServiceTest, CancelKeepsApprovalsForgetDropsThem) {
  Outcome out(io_);
  std::string id = ask_waiting(bash("ses_1", {"make"}), out);
  ASSERT_TRUE(service_->reply(id, Reply::Always).has_value());
  Outcome pending(io_);
  ask_waiting(bash("ses_1", {"cmake"}), pending);
  service_->cancel_session("ses_1");
  EXPECT_EQ(service_->session_rules("ses_1").size(), 1u);
  Outcome waiting_again(io_);
  ask_waiting(bash("ses_1", {"cmake"}), waiting_again);
  service_->forget_session("ses_1");
  EXPECT_EQ(waiting_again.rejection().kind, Rejection::Kind::Cancelled);
  EXPECT_TRUE(service_->session_rules("ses_1").empty());
  Outcome after(io_);
  ask_waiting(bash("ses_1", {"make"}), after);
}

TEST_F(ServiceTest, ListIsOldestFirstAndFiltersBySession) {
  Outcome a(io_), b(io_), c(io_);
  std::string ida = ask_waiting(bash("ses_1", {"a"}), a);
  std::string idb = ask_waiting(bash("ses_2", {"b"}), b);
  std::string idc = ask_waiting(bash("ses_1", {"c"}), c);
  std::vector<std::string> all, one;
  for (auto& r : service_->list())
    all.push_back(r.id);
  for (auto& r : service_->list("ses_1"))
    one.push_back(r.id);
  EXPECT_EQ(all, (std::vector<std::string>{ida, idb, idc}));
  EXPECT_EQ(one, (std::vector<std::string>{ida, idc}));
}

TEST_F(ServiceTest, ShutdownCancelsWaitingAsksAndLaterOnes) {
  Outcome waiting(io_);
  ask_waiting(bash("ses_1", {"make"}), waiting);
  service_->shutdown();
  Rejection r = waiting.rejection();
  EXPECT_EQ(r.kind, Rejection::Kind::Cancelled);
  EXPECT_TRUE(Contains(r.message, "shutting down"));

  Outcome later(io_), allowed(io_);
  ask(bash("ses_1", {"make"}), later);
  EXPECT_TRUE(service_->list().empty());
  io_.poll();
  ASSERT_EQ(later.count(), 1u);
  EXPECT_EQ(later.rejection().kind, Rejection::Kind::Cancelled);
  ask(bash("ses_1", {"ls"}), allowed);
  EXPECT_TRUE(allowed.allowed());  // rules that decide alone still decide
  EXPECT_TRUE(service_->list().empty());
  EXPECT_EQ(events_.of_type("permission.asked").size(), 1u);
}

TEST_F(ServiceTest, DestroyingTheServiceEndsWaitingAsks) {
  Outcome out(io_);
  ask_waiting(bash("ses_1", {"make"}), out);
  service_.reset();
  io_.poll();
  ASSERT_EQ(out.count(), 1u);
  EXPECT_EQ(out.rejection().kind, Rejection::Kind::Cancelled);
}

TEST_F(ServiceTest, ASubscriberMayReplyBeforeAskReturns) {
  // A bus subscriber (an auto-approver, or a client on a fast loopback) answers inside publish():
  // the ask has ended before async_ask returns, and its handler still runs once, posted.
  auto approver = bus_->subscribe([this](const bus::EventPtr& e) {
    if (e->type == "permission.asked")
      (void)service_->reply(std::string(e->properties.at("id").as_string()), Reply::Once);
  });
  Outcome out(io_);
  ask(bash("ses_1", {"make"}), out);
  EXPECT_TRUE(service_->list().empty());
  EXPECT_EQ(events_.of_type("permission.replied").size(), 1u);
  EXPECT_EQ(out.count(), 0u);
  io_.poll();
  EXPECT_EQ(out.count(), 1u);
  EXPECT_TRUE(out.allowed());
}

TEST_F(ServiceTest, HandlersMayCallBackIntoTheService) {
  Outcome second(io_);
  bool ran = false;
  auto handler = [&](AskOutcome) {
    ask(bash("ses_1", {"make again"}), second);
    ran = true;
  };
  service_->async_ask(bash("ses_1", {"make"}), Layers{&config_}, handler);
  ASSERT_EQ(service_->list().size(), 1u);
  ASSERT_TRUE(service_->reply(service_->list()[0].id, Reply::Once).has_value());
  ASSERT_TRUE(run_until(io_, [&] { return ran; }));
  auto left = service_->list();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].patterns, std::vector<std::string>{"make again"});
}

// Replies, rejects, session cancels and timeouts all try to end the same asks, interleaved on the
// one executor: four streams of steps, each step a handler of its own, each stream pausing now
// and then so that deadlines pass (and the timer ends asks) in between.
TEST_F(ServiceTest, EveryAskEndsExactlyOnceWhateverEndsItFirst) {
  constexpr int kAsks = 200;
  std::vector<Outcome> outs;
  for (int i = 0; i < kAsks; ++i) {
    outs.emplace_back(io_);
    AskParams p = bash("ses_" + std::to_string(i % 4), {"make " + std::to_string(i)});
    p.timeout = std::chrono::milliseconds(2 + i % 19);
    ask(std::move(p), outs.back());
  }
  std::vector<std::string> ids;
  for (const auto& asked : events_.of_type("permission.asked"))
    ids.emplace_back(asked.at("id").as_string());
  ASSERT_EQ(ids.size(), static_cast<std::size_t>(kAsks));
  std::vector<std::vector<std::function<void()>>> streams(4);
  for (int i = 0; i < kAsks; i += 2)
    streams[0].push_back([&, i] { (void)service_->reply(ids[i], Reply::Once); });
  for (int i = 1; i < kAsks; i += 3)
    streams[1].push_back([&, i] { (void)service_->reply(ids[i], Reply::Reject, "no"); });
  for (int i = 0; i < 4; ++i)
    streams[2].push_back([&, i] { service_->cancel_session("ses_" + std::to_string(i)); });
  for (int i = kAsks - 1; i >= 0; --i)
    streams[3].push_back([&, i] { (void)service_->reply(ids[i], Reply::Always); });
  std::size_t running = streams.size();
  std::function<void(std::size_t, std::size_t)> step = [&](std::size_t s, std::size_t k) {
    if (k == streams[s].size()) {
      --running;
      return;
    }
    streams[s][k]();
    auto next = [&step, s, k] { step(s, k + 1); };
    // The cancels are spread out; the others pause every 25 steps.
    if (s == 2 || (k + 1) % 25 == 0) {
      auto pause = std::make_shared<boost::asio::steady_timer>(io_, s == 2 ? 4ms : 1ms);
      pause->async_wait([pause, next](boost::system::error_code) { next(); });
    } else {
      boost::asio::post(io_, next);
    }
  };
  for (std::size_t s = 0; s < streams.size(); ++s)
    boost::asio::post(io_, [&step, s] { step(s, 0); });
  ASSERT_TRUE(run_until(io_, [&] { return running == 0; }));
  for (int i = 0; i < kAsks; ++i)
    ASSERT_TRUE(outs[i].wait().has_value()) << i;
  io_.run_for(50ms);  // anything late (a timer) would show up now
  for (int i = 0; i < kAsks; ++i) {
    EXPECT_EQ(outs[i].count(), 1u) << i;
    EXPECT_EQ(events_.replied_count(ids[i]), 1u) << i;
  }
  EXPECT_EQ(service_->pending_count(), 0u);
}

TEST_F(ServiceTest, DoomLoopAskWaitsLikeAnyOther) {
  // The processor's use: doom_loop has no rule by default, so it asks.
  Outcome out(io_);
  AskParams p;
  p.session_id = "ses_1";
  p.permission = "doom_loop";
  p.patterns = {"read"};
  p.metadata = json::object{{"tool", "read"}, {"input", parse(R"({"filePath": "a"})")}};
  std::string id = ask_waiting(std::move(p), out, {config_});
  auto asked = events_.of_type("permission.asked");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].at("permission"), "doom_loop");
  ASSERT_TRUE(service_->reply(id, Reply::Once).has_value());
  EXPECT_TRUE(out.allowed());
}

TEST(Replies, NamesRoundTrip) {
  for (Reply r : {Reply::Once, Reply::Always, Reply::Reject})
    EXPECT_EQ(parse_reply(reply_name(r)), r);
  EXPECT_FALSE(parse_reply("yes").has_value());
}

}  // namespace
}  // namespace sb::permission
