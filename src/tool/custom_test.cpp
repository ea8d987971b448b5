// Tests of custom tools: small shell scripts in a temporary directory play tool providers. They
// check discovery and naming (seed 004), the call protocol of docs/custom-tools.md (argv, stdin
// JSON, stdout JSON or text, exit codes), timeouts and aborts that kill the process group, and
// that every kind of broken provider is skipped with a warning instead of stopping start-up.
#include "tool/custom.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "tool/tool_test_helpers.hpp"

namespace sb::tool {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace sb::tool::testing;

// A directory of tool providers: what is written is executable unless said otherwise.
class TempDir : public testing::TempDir {
 public:
  TempDir() : testing::TempDir("sb_custom_tools") {}

  fs::path write(const std::string& rel, const std::string& content, bool executable = true) const {
    fs::path p = testing::TempDir::write(rel, content);
    ::chmod(p.c_str(), executable ? 0755 : 0644);
    return p;
  }
};

// A provider script: `describe` is what --describe prints, `body` runs for a call.
std::string script(const std::string& describe, const std::string& body) {
  return "#!/bin/sh\nif [ \"$1\" = \"--describe\" ]; then\ncat <<'JSON'\n" + describe +
         "\nJSON\nexit 0\nfi\n" + body + "\n";
}

const std::string kHello = R"({"description": "Says hello", "parameters": {"type": "object",
  "properties": {"name": {"type": "string", "description": "Who"}}, "required": ["name"]}})";

std::vector<std::string> ids(const CustomToolLoad& load) {
  std::vector<std::string> out;
  for (const auto& t : load.tools)
    out.push_back(t->id());
  return out;
}

ToolPtr find(const CustomToolLoad& load, const std::string& id) {
  for (const auto& t : load.tools)
    if (t->id() == id) return t;
  return nullptr;
}

class CustomToolsTest : public ::testing::Test {
 protected:
  CustomToolLoad load(CustomToolOptions options = {}) {
    return load_custom_tools_sync({dir_.path() / "tool", dir_.path() / "tools"}, options);
  }
  Result<ToolResult> call(const ToolPtr& tool, std::string_view json_args) {
    auto ctx = context(asks_, nullptr, dir_.path());
    return run_io(tool->execute(args(json_args), ctx));
  }

  TempDir dir_;
  Asks asks_;
};

TEST_F(CustomToolsTest, SingleDefinitionIsNamedAfterTheFile) {
  dir_.write("tool/hello.sh", script(kHello, R"(printf 'argv1=%s\n' "$1"; pwd; cat)"));
  auto loaded = load();
  EXPECT_TRUE(loaded.warnings.empty()) << loaded.warnings[0];
  ASSERT_EQ(ids(loaded), std::vector<std::string>{"hello"});
  auto tool = loaded.tools[0];
  EXPECT_EQ(tool->description(), "Says hello");
  EXPECT_EQ(tool->parameters().at("required").as_array().size(), 1u);

  auto r = call(tool, R"({"name": "Ada"})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->title, "");  // plugin tools have an empty title unless they give one
  // argv[1] is the definition's name, the working directory is the project, stdin is the call.
  auto lines = r->output;
  ASSERT_EQ(lines.rfind("argv1=default\n" + dir_.path().string() + "\n", 0), 0u) << lines;
  auto request = parse_json(lines.substr(lines.find('{')));
  ASSERT_TRUE(request) << lines;
  const auto& o = request->as_object();
  EXPECT_EQ(o.at("args").at("name"), "Ada");
  EXPECT_EQ(o.at("sessionID"), "ses_test");
  EXPECT_EQ(o.at("messageID"), "msg_test");
  EXPECT_EQ(o.at("callID"), "call_1");
  EXPECT_EQ(o.at("agent"), "build");
  EXPECT_EQ(std::string(o.at("directory").as_string()), dir_.path().string());
}

TEST_F(CustomToolsTest, NamedDefinitionsAreFileUnderscoreName) {
  dir_.write("tools/foo.py", script(R"({
      "default": {"description": "The default one"},
      "bar": {"description": "Bar", "parameters": {"properties": {"n": {"type": "integer"}}}},
      "baz-2": {"description": "Baz"}})",
                                    R"(echo "ran $1")"));
  auto loaded = load();
  EXPECT_TRUE(loaded.warnings.empty()) << loaded.warnings[0];
  EXPECT_EQ(ids(loaded), (std::vector<std::string>{"foo", "foo_bar", "foo_baz-2"}));
  // Schemas without "type" or "properties" are completed to an object schema.
  const auto& params = find(loaded, "foo")->parameters();
  EXPECT_EQ(params.at("type"), "object");
  EXPECT_TRUE(params.at("properties").as_object().empty());
  EXPECT_EQ(find(loaded, "foo_bar")->parameters().at("type"), "object");

  auto r = call(find(loaded, "foo_bar"), R"({"n": 1})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->output, "ran bar\n");
  r = call(find(loaded, "foo"), "{}");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->output, "ran default\n");
}

TEST_F(CustomToolsTest, StructuredAnswers) {
  dir_.write("tool/s.sh",
             script(R"({"description": "structured"})",
                    R"(echo '{"output": "the result", "title": "Did it", "metadata": {"k": 1}}')"));
  dir_.write("tool/e.sh", script(R"({"description": "reports an error"})",
                                 R"(echo '{"error": "no such thing"}')"));
  dir_.write("tool/j.sh", script(R"({"description": "prints JSON data"})", R"(echo '{"a": 1}')"));
  dir_.write("tool/bad.sh", script(R"({"description": "bad answer"})", R"(echo '{"output": 5}')"));
  auto loaded = load();
  ASSERT_EQ(loaded.tools.size(), 4u);

  auto s = call(find(loaded, "s"), "{}");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->output, "the result");
  EXPECT_EQ(s->title, "Did it");
  EXPECT_EQ(s->metadata.at("k"), 1);

  auto e = call(find(loaded, "e"), "{}");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().message, "custom tool e: no such thing");

  auto j = call(find(loaded, "j"), "{}");  // JSON without "output" is just output
  ASSERT_TRUE(j) << j.error().message;
  EXPECT_EQ(j->output, "{\"a\": 1}\n");

  auto bad = call(find(loaded, "bad"), "{}");
  ASSERT_FALSE(bad);
  EXPECT_TRUE(Contains(bad.error().message, "answered with a bad result: output must be a string"));
}

TEST_F(CustomToolsTest, NonZeroExitIsAnErrorWithStderr) {
  dir_.write("tool/fails.sh", script(R"({"description": "fails"})",
                                     "echo 'partial output'; echo 'it went wrong' >&2; exit 3"));
  dir_.write("tool/quiet.sh",
             script(R"({"description": "fails quietly"})", "echo 'only stdout'; exit 1"));
  auto loaded = load();
  auto r = call(find(loaded, "fails"), "{}");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "custom tool fails failed with exit code 3: it went wrong");
  auto q = call(find(loaded, "quiet"), "{}");
  ASSERT_FALSE(q);
  EXPECT_EQ(q.error().message, "custom tool quiet failed with exit code 1: only stdout");
}

TEST_F(CustomToolsTest, TimeoutKillsTheProcessGroup) {
  fs::path pid_file = dir_.path() / "child.pid";
  dir_.write("tool/slow.sh", script(R"({"description": "slow"})",
                                    "sleep 30 & echo $! > '" + pid_file.string() + "'; wait"));
  CustomToolOptions options;
  options.call_timeout = 300ms;
  options.kill_grace = 100ms;
  auto loaded = load(options);
  ASSERT_EQ(loaded.tools.size(), 1u);
  auto start = std::chrono::steady_clock::now();
  auto r = call(loaded.tools[0], "{}");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Timeout);
  EXPECT_TRUE(Contains(r.error().message, "custom tool slow timed out after 300 ms"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  pid_t child = 0;
  std::ifstream(pid_file) >> child;
  ASSERT_GT(child, 0);
  EXPECT_TRUE(stops_running(child)) << "the background sleep survived";
}

TEST_F(CustomToolsTest, AbortEndsTheCall) {
  dir_.write("tool/slow.sh", script(R"({"description": "slow"})", "sleep 30"));
  auto loaded = load();
  ASSERT_EQ(loaded.tools.size(), 1u);
  auto ctx = context(asks_, nullptr, dir_.path());
  auto start = std::chrono::steady_clock::now();
  auto r = run_io(
      aborted_after(100ms, ctx.abort, "stop", loaded.tools[0]->execute(json::object{}, ctx)));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "aborted");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST_F(CustomToolsTest, OversizedOutputIsCut) {
  dir_.write("tool/big.sh",
             script(R"({"description": "big"})", "head -c 5000 /dev/zero | tr '\\0' a"));
  CustomToolOptions options;
  options.max_output = 100;
  auto loaded = load(options);
  auto r = call(loaded.tools[0], "{}");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->output.substr(0, 100), std::string(100, 'a'));
  EXPECT_TRUE(Contains(r->output,
                       "(Output exceeded 100 bytes; the remaining 4900 bytes were "
                       "discarded.)"));
}

TEST_F(CustomToolsTest, BrokenProvidersAreSkippedWithWarnings) {
  dir_.write("tool/a_good.sh", script(kHello, "echo hi"));
  dir_.write("tool/notjson.sh", "#!/bin/sh\necho 'this is not json'\n");
  dir_.write("tool/array.sh", "#!/bin/sh\necho '[1, 2]'\n");
  dir_.write("tool/exits.sh", "#!/bin/sh\necho 'cannot describe' >&2; exit 2\n");
  dir_.write("tool/hangs.sh", "#!/bin/sh\nsleep 30\n");
  dir_.write("tool/badschema.sh",
             script(R"({"description": "x", "parameters": {"type": "string"}})", ""));
  dir_.write(
      "tool/badschema2.sh",
      script(R"({"description": "x", "parameters": {"properties": {"a": {"type": 5}}}})", ""));
  dir_.write("tool/nodesc.sh", script(R"({"parameters": {}})", ""));
  dir_.write("tool/mixed.sh", script(R"({"ok": {"description": "fine"},
      "bad name!": {"description": "x"}, "nodesc": {"parameters": {}}})",
                                     ""));
  dir_.write("tool/my.tool.sh", script(R"({"description": "dotted"})", ""));
  dir_.write("tool/plain.ts", "export default {}", false);
  dir_.write("tool/README.md", "# my tools", false);
  dir_.write("tool/.hidden.sh", script(kHello, ""));
  dir_.write("tool/backup.sh~", script(kHello, ""));
  fs::create_directories(dir_.path() / "tool" / "subdir");

  CustomToolOptions options;
  options.describe_timeout = 500ms;
  options.kill_grace = 100ms;
  auto start = std::chrono::steady_clock::now();
  auto loaded = load(options);
  // Described in parallel: one slow file costs its own timeout, not the sum.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_EQ(ids(loaded), (std::vector<std::string>{"a_good", "mixed_ok"}));

  auto warned = [&](const std::string& file, const std::string& text) {
    for (const auto& w : loaded.warnings)
      if (w.find(file) != std::string::npos && w.find(text) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(warned("notjson.sh", "--describe did not print JSON"));
  EXPECT_TRUE(warned("array.sh", "must print a JSON object, got array"));
  EXPECT_TRUE(warned("exits.sh", "--describe failed with exit code 2: cannot describe"));
  EXPECT_TRUE(warned("hangs.sh", "--describe timed out after 500 ms"));
  EXPECT_TRUE(warned("badschema.sh", "must describe an object"));
  EXPECT_TRUE(warned("badschema2.sh", "parameters is not a valid JSON Schema"));
  EXPECT_TRUE(warned("nodesc.sh", "has no description"));
  EXPECT_TRUE(warned("mixed.sh", "the tool name \"bad name!\" is not valid"));
  EXPECT_TRUE(warned("mixed.sh", "the definition of \"nodesc\" has no description"));
  EXPECT_TRUE(warned("my.tool.sh", "\"my.tool\" is not a valid tool id"));
  EXPECT_TRUE(warned("plain.ts", "is not executable"));
  EXPECT_FALSE(warned("README.md", ""));
  EXPECT_FALSE(warned(".hidden.sh", ""));
  EXPECT_FALSE(warned("backup.sh~", ""));
  EXPECT_FALSE(warned("subdir", ""));
  EXPECT_EQ(loaded.warnings.size(), 11u);
  for (const auto& w : loaded.warnings)
    EXPECT_TRUE(Contains(w, "skipped")) << w;
}

TEST_F(CustomToolsTest, LaterDirectoriesOverrideEarlierOnes) {
  TempDir project;
  dir_.write("tool/same.sh", script(R"({"description": "user's"})", "echo user"));
  dir_.write("tools/other.sh", script(R"({"description": "other"})", "echo other"));
  project.write(".switchboard/tools/same.sh",
                script(R"({"description": "project's"})", "echo project"));
  auto dirs = custom_tool_directories(dir_.path(), project.path());
  ASSERT_EQ(dirs.size(), 4u);
  EXPECT_EQ(dirs[0], dir_.path() / "tool");
  EXPECT_EQ(dirs[1], dir_.path() / "tools");
  EXPECT_EQ(dirs[2], project.path() / ".switchboard" / "tool");
  EXPECT_EQ(dirs[3], project.path() / ".switchboard" / "tools");

  auto loaded = load_custom_tools_sync(dirs);
  EXPECT_EQ(ids(loaded), (std::vector<std::string>{"same", "other"}));
  EXPECT_EQ(find(loaded, "same")->description(), "project's");
  ASSERT_EQ(loaded.warnings.size(), 1u);
  EXPECT_TRUE(
      Contains(loaded.warnings[0], "custom tool same of " +
                                       (project.path() / ".switchboard/tools/same.sh").string() +
                                       " replaces the one of "));
}

TEST_F(CustomToolsTest, MissingDirectoriesAreFine) {
  auto loaded = load_custom_tools_sync({dir_.path() / "nope", dir_.path() / "nope2"});
  EXPECT_TRUE(loaded.tools.empty());
  EXPECT_TRUE(loaded.warnings.empty());
  dir_.write("file_not_dir", "x", false);
  loaded = load_custom_tools_sync({dir_.path() / "file_not_dir"});
  ASSERT_EQ(loaded.warnings.size(), 1u);
  EXPECT_TRUE(Contains(loaded.warnings[0], "is not a directory"));
}

TEST_F(CustomToolsTest, AsynchronousLoadOnTheCallersExecutor) {
  dir_.write("tool/hello.sh", script(kHello, "echo hi"));
  auto loaded = run_io(load_custom_tools({dir_.path() / "tool"}));
  EXPECT_EQ(ids(loaded), std::vector<std::string>{"hello"});
}

TEST(CustomToolDescription, Parse) {
  std::vector<std::string> warnings;
  auto single = parse_custom_tool_description("t", R"({"description": "d"})", warnings);
  ASSERT_TRUE(single) << single.error().message;
  ASSERT_EQ(single->size(), 1u);
  EXPECT_EQ((*single)[0].id, "t");
  EXPECT_EQ((*single)[0].name, "default");

  // An object named "description" is a named definition, not a description.
  auto named = parse_custom_tool_description(
      "t", R"({"description": {"description": "d"}, "default": {"description": "e"}})", warnings);
  ASSERT_TRUE(named) << named.error().message;
  ASSERT_EQ(named->size(), 2u);
  EXPECT_EQ((*named)[0].id, "t_description");
  EXPECT_EQ((*named)[1].id, "t");
  EXPECT_TRUE(warnings.empty());

  auto empty = parse_custom_tool_description("t", "{}", warnings);
  ASSERT_FALSE(empty);
  EXPECT_TRUE(Contains(empty.error().message, "no tool definitions"));

  auto too_long = parse_custom_tool_description(std::string(60, 'x'),
                                                R"({"abcdef": {"description": "d"}})", warnings);
  ASSERT_TRUE(too_long);
  EXPECT_TRUE(too_long->empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(Contains(warnings[0], "is not a valid tool id"));

  EXPECT_TRUE(valid_tool_id("a-b_C9"));
  EXPECT_FALSE(valid_tool_id(""));
  EXPECT_FALSE(valid_tool_id("a b"));
  EXPECT_FALSE(valid_tool_id(std::string(65, 'a')));
}

}  // namespace
}  // namespace sb::tool
