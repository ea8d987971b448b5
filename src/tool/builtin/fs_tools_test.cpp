// Tests of the file tools (read, write, edit), the todo tools, the invalid tool and argument
// preparation, as the model and the person approving calls observe them: outputs, errors,
// permission requests and what ends up on disk.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bus/event_bus.hpp"
#include "tool/arguments.hpp"
#include "tool/builtin/edit.hpp"
#include "tool/builtin/file_util.hpp"
#include "tool/builtin/invalid.hpp"
#include "tool/builtin/read.hpp"
#include "tool/builtin/todo.hpp"
#include "tool/builtin/write.hpp"
#include "tool/tool_test_helpers.hpp"
#include "util/run_to_end.hpp"
#include "util/text.hpp"

namespace sb::tool {
namespace {

namespace fs = std::filesystem;
namespace asio = boost::asio;

// --- helpers -----------------------------------------------------------------------------------

using testing::Contains;
using testing::read_all;
using testing::run_io;

void write_all(const fs::path& path, std::string_view content) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
}

json::value parse(std::string_view text) {
  auto v = parse_json(text);
  if (!v) throw std::runtime_error("bad test JSON: " + v.error().message);
  return *v;
}

asio::awaitable<void> store_result(asio::awaitable<Result<ToolResult>> task,
                                   std::optional<Result<ToolResult>>& out) {
  out.emplace(co_await std::move(task));
}

asio::awaitable<Result<void>> answer(Result<void> r) {
  co_return r;
}

// Allows after a pause, as a person would: other calls run meanwhile.
asio::awaitable<Result<void>> answer_later(std::chrono::milliseconds delay) {
  asio::steady_timer timer(co_await asio::this_coro::executor, delay);
  co_await timer.async_wait(asio::use_awaitable);
  co_return Result<void>{};
}

// A project directory and a directory outside it, a context whose `ask` records every
// permission request and answers with `decide`.
class ToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "sb_fs_tools_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    project_ = root_ / "project";
    outside_ = root_ / "outside";
    fs::create_directories(project_);
    fs::create_directories(outside_);
    ctx_.session_id = "ses_test";
    ctx_.message_id = "msg_test";
    ctx_.call_id = "call_1";
    ctx_.agent = "build";
    ctx_.directory = project_;
    ctx_.data_dir = root_ / "data";
    ctx_.ask = [this](PermissionRequest req) {
      requests_.push_back(req);
      if (decide_ && !decide_(req))
        return answer(make_error(ErrorCode::Forbidden,
                                 "The user rejected permission to use this specific tool call."));
      return answer(Result<void>{});
    };
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(root_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(root_, ec);
  }

  // What the processor does: prepare the model's arguments, then execute.
  Result<ToolResult> call(Tool& tool, std::string_view args_json) {
    auto args = prepare_arguments(tool, parse(args_json));
    if (!args) return args.error();
    return run_io(tool.execute(std::move(*args), ctx_));
  }
  Result<ToolResult> call(Tool& tool, json::object args) {
    auto prepared = prepare_arguments(tool, json::value(std::move(args)));
    if (!prepared) return prepared.error();
    return run_io(tool.execute(std::move(*prepared), ctx_));
  }

  std::vector<std::string> asked_permissions() const {
    std::vector<std::string> out;
    for (const auto& r : requests_)
      out.push_back(r.permission);
    return out;
  }
  const PermissionRequest* request_for(std::string_view permission) const {
    for (const auto& r : requests_)
      if (r.permission == permission) return &r;
    return nullptr;
  }
  void deny(std::string permission) {
    decide_ = [permission](const PermissionRequest& r) { return r.permission != permission; };
  }

  fs::path root_, project_, outside_;
  ToolContext ctx_;
  std::vector<PermissionRequest> requests_;
  std::function<bool(const PermissionRequest&)> decide_;
};

std::string numbered(std::size_t n) {
  std::string out;
  for (std::size_t i = 1; i <= n; ++i)
    out += "line " + std::to_string(i) + "\n";
  return out;
}

// --- read --------------------------------------------------------------------------------------

class ReadTest : public ToolTest {
 protected:
  ToolPtr read_ = make_read_tool();
  Result<ToolResult> read(const fs::path& path, std::string extra = "") {
    json::object args{{"filePath", path.string()}};
    if (!extra.empty()) {
      json::value more = parse(extra);
      for (auto& [k, v] : more.get_object())
        args[k] = v;
    }
    return call(*read_, std::move(args));
  }
};

TEST_F(ReadTest, NumbersLinesInOpenCodeFormatAndSaysWhereTheFileEnds) {
  write_all(project_ / "a.txt", "alpha\nbeta\ngamma\n");
  auto r = read(project_ / "a.txt");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->output,
            "<file>\n00001| alpha\n00002| beta\n00003| gamma\n\n(End of file - total 3 lines)\n"
            "</file>");
  EXPECT_EQ(r->title, "a.txt");
  EXPECT_EQ(r->metadata.at("truncated"), false);
  EXPECT_EQ(r->metadata.at("preview"), "alpha\nbeta\ngamma");
  EXPECT_TRUE(r->attachments.empty());
}

TEST_F(ReadTest, AsksReadPermissionWithTheAbsolutePath) {
  write_all(project_ / "src" / "main.cpp", "int main() {}\n");
  ASSERT_TRUE(read(project_ / "src" / "main.cpp"));
  ASSERT_EQ(asked_permissions(), std::vector<std::string>{"read"});
  EXPECT_EQ(requests_[0].patterns, std::vector<std::string>{(project_ / "src/main.cpp").string()});
  EXPECT_EQ(requests_[0].always, std::vector<std::string>{"*"});
}

TEST_F(ReadTest, RelativePathsResolveAgainstTheProjectDirectory) {
  write_all(project_ / "docs" / "x.md", "hello\n");
  auto r = call(*read_, R"({"filePath": "docs/x.md"})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(Contains(r->output, "00001| hello"));
  EXPECT_EQ(r->title, "docs/x.md");
}

TEST_F(ReadTest, OffsetIsZeroBasedAndLimitCountsLinesWithANoteToReadOn) {
  write_all(project_ / "ten.txt", numbered(10));
  auto r = read(project_ / "ten.txt", R"({"offset": 3, "limit": 2})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->output,
            "<file>\n00004| line 4\n00005| line 5\n\n(File has more lines. Use 'offset' "
            "parameter to read beyond line 5)\n</file>");
  EXPECT_EQ(r->metadata.at("truncated"), true);

  // Following the note reads on from where the first call stopped, to the end.
  auto next = read(project_ / "ten.txt", R"({"offset": 5})");
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_TRUE(Contains(next->output, "<file>\n00006| line 6\n"));
  EXPECT_TRUE(Contains(next->output, "00010| line 10\n\n(End of file - total 10 lines)\n</file>"));
}

TEST_F(ReadTest, ReadsAtMost2000LinesByDefault) {
  write_all(project_ / "big.txt", numbered(2500));
  auto r = read(project_ / "big.txt");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(Contains(r->output,
                       "02000| line 2000\n\n(File has more lines. Use 'offset' "
                       "parameter to read beyond line 2000)"));
  EXPECT_FALSE(Contains(r->output, "02001|"));
}

TEST_F(ReadTest, LineNumbersGrowPastFiveDigits) {
  write_all(project_ / "many.txt", numbered(100001));
  auto r = read(project_ / "many.txt", R"({"offset": 99998})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(Contains(r->output, "99999| line 99999\n100000| line 100000\n100001| line 100001"));
}

TEST_F(ReadTest, CutsLinesLongerThan2000CharactersAtACharacterBoundary) {
  std::string ascii(2500, 'x');
  std::string accented;
  for (int i = 0; i < 2500; ++i)
    accented += "\xC3\xA9";  // é, two bytes each
  write_all(project_ / "long.txt", ascii + "\n" + accented + "\nshort\n");
  auto r = read(project_ / "long.txt");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(Contains(r->output, "00001| " + std::string(2000, 'x') + "...\n"));
  std::string cut;
  for (int i = 0; i < 2000; ++i)
    cut += "\xC3\xA9";
  EXPECT_TRUE(Contains(r->output, "00002| " + cut + "...\n"));
  EXPECT_TRUE(Contains(r->output, "00003| short\n"));
  EXPECT_TRUE(is_valid_utf8(r->output));
}

TEST_F(ReadTest, AHugeSingleLineIsCutNotLoaded) {
  write_all(project_ / "minified.js", std::string(8 << 20, 'a') + "\nnext\n");
  auto r = read(project_ / "minified.js");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(Contains(r->output, "00001| " + std::string(2000, 'a') + "...\n00002| next\n"));
  EXPECT_LT(r->output.size(), 3000u);
}

TEST_F(ReadTest, StopsAt50KilobytesWithANoteNamingTheNextOffset) {
  std::string line(99, 'y');
  std::string content;
  for (int i = 0; i < 1500; ++i)
    content += line + "\n";  // 150 KB, fewer than 2000 lines
  write_all(project_ / "wide.txt", content);
  auto r = read(project_ / "wide.txt");
  ASSERT_TRUE(r) << r.error().message;
  // The limit is on the output as written: a line is "00001| " (7 bytes), its 99 bytes and a
  // newline; 478 lines fit in 51200 bytes (106 + 477 * 107), the 479th does not.
  EXPECT_TRUE(Contains(r->output, "00478| " + line +
                                      "\n\n(Output truncated at 51200 bytes. Use "
                                      "'offset' parameter to read beyond line "
                                      "478)"));
  EXPECT_FALSE(Contains(r->output, "00479|"));
  EXPECT_LE(r->output.size(), 51200u + 200u);  // the lines and the frame around them
  EXPECT_EQ(r->metadata.at("truncated"), true);
}

TEST_F(ReadTest, CrlfLinesAreShownWithoutCarriageReturns) {
  write_all(project_ / "win.txt", "first\r\nsecond\r\n");
  auto r = read(project_ / "win.txt");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->output,
            "<file>\n00001| first\n00002| second\n\n(End of file - total 2 lines)\n</file>");
}

TEST_F(ReadTest, ALastLineWithoutNewlineIsALine) {
  write_all(project_ / "nonl.txt", "one\ntwo");
  auto r = read(project_ / "nonl.txt");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(Contains(r->output, "00002| two\n\n(End of file - total 2 lines)"));
}

TEST_F(ReadTest, Utf8IsKeptAndInvalidBytesBecomeReplacementCharacters) {
  write_all(project_ / "text.txt", "gr\xC3\xBC\xC3\x9F dich \xE2\x9C\x93\ncaf\xE9 latin-1\n");
  auto r = read(project_ / "text.txt");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(Contains(r->output, "00001| gr\xC3\xBC\xC3\x9F dich \xE2\x9C\x93\n"));
  EXPECT_TRUE(Contains(r->output, "00002| caf\xEF\xBF\xBD latin-1\n"));
  EXPECT_TRUE(is_valid_utf8(r->output));
}

TEST_F(ReadTest, AnEmptyFileSaysSo) {
  write_all(project_ / "empty.txt", "");
  auto r = read(project_ / "empty.txt");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->output, "<file>\n(This file exists but is empty.)\n</file>");
}

TEST_F(ReadTest, AnOffsetPastTheEndIsAnError) {
  write_all(project_ / "three.txt", "a\nb\nc\n");
  auto r = read(project_ / "three.txt", R"({"offset": 3})");
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, "Offset 3 is out of range for this file (3 lines)"));
}

TEST_F(ReadTest, BinaryFilesAreRefused) {
  write_all(project_ / "data.raw", std::string("ELF\0\1\2", 6) + "rest");
  auto r = read(project_ / "data.raw");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "Cannot read binary file: " + (project_ / "data.raw").string());

  // Known binary extensions are refused whatever their bytes.
  write_all(project_ / "archive.zip", "looks like text\n");
  auto zip = read(project_ / "archive.zip");
  ASSERT_FALSE(zip);
  EXPECT_TRUE(Contains(zip.error().message, "Cannot read binary file"));

  // Mostly control characters, no NUL.
  write_all(project_ / "noise.txt", std::string(100, '\x01') + "abc");
  auto noise = read(project_ / "noise.txt");
  ASSERT_FALSE(noise);
  EXPECT_TRUE(Contains(noise.error().message, "Cannot read binary file"));
}

TEST_F(ReadTest, AMissingFileSuggestsSimilarNames) {
  write_all(project_ / "config.json", "{}");
  write_all(project_ / "config.yaml", "a: 1");
  write_all(project_ / "other.txt", "x");
  auto r = read(project_ / "Config");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::NotFound);
  EXPECT_EQ(r.error().message, "File not found: " + (project_ / "Config").string() +
                                   "\n\nDid you mean one of these?\n" +
                                   (project_ / "config.json").string() + "\n" +
                                   (project_ / "config.yaml").string());

  auto none = read(project_ / "zzz.txt");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().message, "File not found: " + (project_ / "zzz.txt").string());
}

TEST_F(ReadTest, ADirectoryIsAnErrorPointingToTheListTool) {
  fs::create_directories(project_ / "src");
  auto r = read(project_ / "src");
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, "is a directory"));
  EXPECT_TRUE(Contains(r.error().message, "list tool"));
}

TEST_F(ReadTest, ImagesAndPdfsComeBackAsAttachments) {
  std::string png("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16);
  write_all(project_ / "logo.png", png);
  auto r = read(project_ / "logo.png");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->output, "Image read successfully");
  ASSERT_EQ(r->attachments.size(), 1u);
  const auto& a = r->attachments[0].as_object();
  EXPECT_EQ(a.at("type"), "file");
  EXPECT_EQ(a.at("mime"), "image/png");
  EXPECT_EQ(a.at("filename"), "logo.png");
  EXPECT_EQ(a.at("url"), "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg==");

  write_all(project_ / "doc.pdf", "%PDF-1.4");
  auto pdf = read(project_ / "doc.pdf");
  ASSERT_TRUE(pdf) << pdf.error().message;
  EXPECT_EQ(pdf->output, "PDF read successfully");
  EXPECT_EQ(pdf->attachments[0].as_object().at("url"), "data:application/pdf;base64,JVBERi0xLjQ=");
}

TEST_F(ReadTest, DeniedReadPermissionIsAnErrorWithNoContent) {
  write_all(project_ / "secret.env", "TOKEN=abc\n");
  deny("read");
  auto r = read(project_ / "secret.env");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Forbidden);
  EXPECT_TRUE(Contains(r.error().message, "rejected"));
  EXPECT_EQ(asked_permissions(), std::vector<std::string>{"read"});
}

TEST_F(ReadTest, APathOutsideTheProjectAsksExternalDirectoryFirst) {
  write_all(outside_ / "notes.txt", "outside\n");
  auto r = read(outside_ / "notes.txt");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(asked_permissions(), (std::vector<std::string>{"external_directory", "read"}));
  EXPECT_EQ(requests_[0].patterns, std::vector<std::string>{(outside_ / "*").string()});
  EXPECT_EQ(r->title, (outside_ / "notes.txt").string());

  // Denied: nothing is read and read itself is never asked.
  requests_.clear();
  deny("external_directory");
  auto denied = call(*read_, R"({"filePath": "../outside/notes.txt"})");
  ASSERT_FALSE(denied);
  EXPECT_EQ(asked_permissions(), std::vector<std::string>{"external_directory"});
}

TEST_F(ReadTest, ASymlinkLeadingOutsideTheProjectCountsAsOutside) {
  write_all(outside_ / "target.txt", "through the link\n");
  fs::create_symlink(outside_ / "target.txt", project_ / "link.txt");
  deny("external_directory");
  auto r = read(project_ / "link.txt");
  ASSERT_FALSE(r);
  EXPECT_EQ(asked_permissions(), std::vector<std::string>{"external_directory"});
}

// The ask names where a link leads: approving "always" for it covers that place, not the
// project directory the link sits in (which let every other link in the project lead anywhere).
TEST_F(ReadTest, ALinkLeadingOutsideIsAskedForWhereItLeads) {
  write_all(outside_ / "target.txt", "through the link\n");
  fs::create_directories(root_ / "elsewhere");
  write_all(root_ / "elsewhere" / "secret.txt", "elsewhere\n");
  fs::create_symlink(outside_ / "target.txt", project_ / "link.txt");
  fs::create_directory_symlink(root_ / "elsewhere", project_ / "other");
  auto r = read(project_ / "link.txt");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(asked_permissions(), (std::vector<std::string>{"external_directory", "read"}));
  std::string outside = (fs::canonical(outside_) / "*").string();
  EXPECT_EQ(requests_[0].patterns, std::vector<std::string>{outside});
  EXPECT_EQ(requests_[0].always, std::vector<std::string>{outside});
  EXPECT_EQ(requests_[0].metadata.at("filepath"), json::value((project_ / "link.txt").string()));
  EXPECT_EQ(requests_[0].metadata.at("target"),
            json::value((fs::canonical(outside_) / "target.txt").string()));

  requests_.clear();
  auto other = call(*read_, R"({"filePath": "other/secret.txt"})");
  ASSERT_TRUE(other) << other.error().message;
  ASSERT_EQ(asked_permissions(), (std::vector<std::string>{"external_directory", "read"}));
  EXPECT_EQ(requests_[0].patterns,
            std::vector<std::string>{(fs::canonical(root_ / "elsewhere") / "*").string()});
}

TEST_F(ReadTest, ADirectoryLinkLeadingOutsideTheProjectCountsAsOutside) {
  write_all(outside_ / "notes.txt", "through the directory link\n");
  fs::create_directory_symlink(outside_, project_ / "shared");
  deny("external_directory");
  auto r = call(*read_, R"({"filePath": "shared/notes.txt"})");
  ASSERT_FALSE(r);
  EXPECT_EQ(asked_permissions(), std::vector<std::string>{"external_directory"});
}

TEST_F(ReadTest, ALinkThatStaysInsideTheProjectAsksNothingMore) {
  write_all(project_ / "src" / "a.txt", "inside\n");
  fs::create_directory_symlink(project_ / "src", project_ / "alias");
  auto r = call(*read_, R"({"filePath": "alias/a.txt"})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(asked_permissions(), std::vector<std::string>{"read"});
}

TEST_F(ReadTest, AProjectDirectoryNamedThroughASymlinkIsStillTheProject) {
  write_all(project_ / "notes.txt", "inside\n");
  write_all(outside_ / "notes.txt", "outside\n");
  fs::create_directory_symlink(project_, root_ / "via");
  ctx_.directory = root_ / "via";
  // Relative to the link, and by the project's real path: both inside.
  ASSERT_TRUE(call(*read_, R"({"filePath": "notes.txt"})"));
  ASSERT_TRUE(read(project_ / "notes.txt"));
  EXPECT_EQ(asked_permissions(), (std::vector<std::string>{"read", "read"}));
  // Out of it by "..": outside.
  requests_.clear();
  deny("external_directory");
  EXPECT_FALSE(call(*read_, R"({"filePath": "../outside/notes.txt"})"));
  EXPECT_EQ(asked_permissions(), std::vector<std::string>{"external_directory"});
}

// --- write -------------------------------------------------------------------------------------

class WriteTest : public ToolTest {
 protected:
  std::shared_ptr<bus::EventBus> bus_ = bus::EventBus::create();
  ToolPtr write_ = make_write_tool(bus_);
  Result<ToolResult> write(const std::string& path, const std::string& content) {
    return call(*write_, json::object{{"filePath", path}, {"content", content}});
  }
};

TEST_F(WriteTest, CreatesTheFileAndItsParentDirectories) {
  auto r = write((project_ / "sub/dir/new.txt").string(), "hello\nworld\n");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(read_all(project_ / "sub/dir/new.txt"), "hello\nworld\n");
  EXPECT_EQ(r->title, "sub/dir/new.txt");
  EXPECT_EQ(r->metadata.at("exists"), false);
  EXPECT_EQ(r->metadata.at("filepath"), json::value((project_ / "sub/dir/new.txt").string()));
  EXPECT_TRUE(Contains(r->output, "Wrote file successfully"));

  ASSERT_EQ(asked_permissions(), std::vector<std::string>{"edit"});
  EXPECT_EQ(requests_[0].patterns, std::vector<std::string>{"sub/dir/new.txt"});
  EXPECT_TRUE(Contains(json::serialize(requests_[0].metadata.at("diff")), "+hello"));
  EXPECT_TRUE(Contains(json::serialize(r->metadata.at("diff")), "+world"));
  EXPECT_EQ(r->metadata.at("additions"), 2);
  EXPECT_EQ(r->metadata.at("deletions"), 0);
}

TEST_F(WriteTest, ReplacesAnExistingFileKeepingItsMode) {
  write_all(project_ / "run.sh", "echo old\n");
  fs::permissions(project_ / "run.sh", fs::perms(0755));
  auto r = write("run.sh", "echo new\n");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(read_all(project_ / "run.sh"), "echo new\n");
  EXPECT_EQ(r->metadata.at("exists"), true);
  EXPECT_EQ(fs::status(project_ / "run.sh").permissions() & fs::perms::all, fs::perms(0755));
  const auto* req = request_for("edit");
  ASSERT_NE(req, nullptr);
  std::string diff(req->metadata.at("diff").as_string());
  EXPECT_TRUE(Contains(diff, "-echo old\n+echo new\n"));
  // The result says what changed too, as edit's does (the page shows it after a reload).
  EXPECT_EQ(r->metadata.at("diff"), req->metadata.at("diff"));
  EXPECT_EQ(r->metadata.at("additions"), 1);
  EXPECT_EQ(r->metadata.at("deletions"), 1);
  // No temporary file is left beside it.
  std::size_t entries = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(project_))
    ++entries;
  EXPECT_EQ(entries, 1u);
}

TEST_F(WriteTest, DeniedPermissionLeavesTheFileUntouched) {
  write_all(project_ / "keep.txt", "original\n");
  deny("edit");
  auto r = write("keep.txt", "replaced\n");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Forbidden);
  EXPECT_EQ(read_all(project_ / "keep.txt"), "original\n");

  auto created = write("never.txt", "x");
  ASSERT_FALSE(created);
  EXPECT_FALSE(fs::exists(project_ / "never.txt"));
}

TEST_F(WriteTest, OutsideTheProjectAsksExternalDirectory) {
  auto r = write((outside_ / "out.txt").string(), "far away\n");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(asked_permissions(), (std::vector<std::string>{"external_directory", "edit"}));
  EXPECT_EQ(read_all(outside_ / "out.txt"), "far away\n");
  // The edit pattern of a file outside is its absolute path, not "../outside/out.txt".
  EXPECT_EQ(request_for("edit")->patterns,
            std::vector<std::string>{(outside_ / "out.txt").string()});

  requests_.clear();
  deny("external_directory");
  auto denied = write((outside_ / "no.txt").string(), "x");
  ASSERT_FALSE(denied);
  EXPECT_FALSE(fs::exists(outside_ / "no.txt"));
  EXPECT_EQ(asked_permissions(), std::vector<std::string>{"external_directory"});
}

TEST_F(WriteTest, ANewFileBelowADirectoryLinkLeadingOutsideCountsAsOutside) {
  fs::create_directory_symlink(outside_, project_ / "out");
  deny("external_directory");
  auto r = write("out/new/file.txt", "x");
  ASSERT_FALSE(r);
  EXPECT_EQ(asked_permissions(), std::vector<std::string>{"external_directory"});
  EXPECT_FALSE(fs::exists(outside_ / "new"));
  // A new file in a new directory of the project itself is inside.
  requests_.clear();
  ASSERT_TRUE(write("fresh/dir/file.txt", "y"));
  EXPECT_EQ(asked_permissions(), std::vector<std::string>{"edit"});
}

TEST_F(WriteTest, WritesUtf8ContentByteForByte) {
  std::string content = "// h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x98\x80\n";
  ASSERT_TRUE(write("u.txt", content));
  EXPECT_EQ(read_all(project_ / "u.txt"), content);
}

TEST_F(WriteTest, ADirectoryCannotBeWritten) {
  fs::create_directories(project_ / "adir");
  auto r = write("adir", "x");
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, "is a directory"));
  EXPECT_TRUE(requests_.empty());
}

TEST_F(WriteTest, WritingThroughASymlinkKeepsTheLink) {
  write_all(project_ / "real.txt", "old");
  fs::create_symlink("real.txt", project_ / "alias.txt");
  ASSERT_TRUE(write("alias.txt", "new"));
  EXPECT_TRUE(fs::is_symlink(project_ / "alias.txt"));
  EXPECT_EQ(read_all(project_ / "real.txt"), "new");
}

TEST_F(WriteTest, PublishesFileEdited) {
  std::vector<bus::EventPtr> events;
  auto sub = bus_->subscribe([&](const bus::EventPtr& e) { events.push_back(e); });
  ASSERT_TRUE(write("e.txt", "x"));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]->type, "file.edited");
  EXPECT_EQ(events[0]->properties.at("file"), json::value((project_ / "e.txt").string()));
}

TEST_F(WriteTest, AnAbortDuringThePermissionWaitWritesNothing) {
  decide_ = [this](const PermissionRequest&) {
    ctx_.abort->abort("the user stopped the turn");
    return true;
  };
  auto r = write("late.txt", "x");
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, "aborted"));
  EXPECT_FALSE(fs::exists(project_ / "late.txt"));
}

TEST_F(WriteTest, AnUnwritableDirectoryIsAnErrorNamingThePath) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  fs::create_directories(project_ / "locked");
  fs::permissions(project_ / "locked", fs::perms(0555));
  auto r = write("locked/f.txt", "x");
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, (project_ / "locked/f.txt").string()));
  EXPECT_TRUE(Contains(r.error().message, "Permission denied"));
}

TEST_F(WriteTest, AWritableFileInAReadOnlyDirectoryIsWrittenInPlace) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  write_all(project_ / "ro" / "f.txt", "old");
  fs::permissions(project_ / "ro", fs::perms(0555));
  auto r = write("ro/f.txt", "new");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(read_all(project_ / "ro" / "f.txt"), "new");
}

// --- edit --------------------------------------------------------------------------------------

class EditTest : public ToolTest {
 protected:
  std::shared_ptr<bus::EventBus> bus_ = bus::EventBus::create();
  ToolPtr edit_ = make_edit_tool(bus_);
  Result<ToolResult> edit(const std::string& path, const std::string& old_string,
                          const std::string& new_string, std::optional<bool> replace_all = {}) {
    json::object args{{"filePath", path}, {"oldString", old_string}, {"newString", new_string}};
    if (replace_all) args["replaceAll"] = *replace_all;
    return call(*edit_, std::move(args));
  }
};

TEST_F(EditTest, ReplacesTheExactTextOnceAndReportsTheDiff) {
  write_all(project_ / "m.cpp", "int a = 1;\nint b = 2;\nint c = 3;\n");
  auto r = edit("m.cpp", "int b = 2;", "int b = 20;");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(read_all(project_ / "m.cpp"), "int a = 1;\nint b = 20;\nint c = 3;\n");
  EXPECT_EQ(r->output, "Edit applied successfully.");
  EXPECT_EQ(r->title, "m.cpp");
  EXPECT_EQ(r->metadata.at("diff"),
            "--- m.cpp\n+++ m.cpp\n@@ -1,3 +1,3 @@\n int a = 1;\n-int b = 2;\n+int b = 20;\n int "
            "c = 3;\n");
  EXPECT_EQ(r->metadata.at("additions"), 1u);
  EXPECT_EQ(r->metadata.at("deletions"), 1u);
  EXPECT_EQ(r->metadata.at("filediff").at("additions"), 1u);

  ASSERT_EQ(asked_permissions(), std::vector<std::string>{"edit"});
  EXPECT_EQ(requests_[0].patterns, std::vector<std::string>{"m.cpp"});
  EXPECT_EQ(requests_[0].metadata.at("diff"), r->metadata.at("diff"));
}

TEST_F(EditTest, TextThatIsNotThereIsAnErrorAndChangesNothing) {
  write_all(project_ / "f.txt", "alpha\nbeta\n");
  auto r = edit("f.txt", "gamma", "delta");
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, "oldString not found in content"));
  EXPECT_EQ(read_all(project_ / "f.txt"), "alpha\nbeta\n");
  EXPECT_TRUE(requests_.empty());
}

TEST_F(EditTest, SeveralMatchesWithoutReplaceAllIsAnError) {
  write_all(project_ / "f.txt", "x = 1\nx = 1\n");
  auto r = edit("f.txt", "x = 1", "x = 2");
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message,
                       "Found multiple matches for oldString. Provide more surrounding lines in "
                       "oldString to identify the correct match."));
  EXPECT_TRUE(Contains(r.error().message, "2 times"));
  EXPECT_EQ(read_all(project_ / "f.txt"), "x = 1\nx = 1\n");
}

TEST_F(EditTest, ReplaceAllChangesEveryOccurrence) {
  write_all(project_ / "f.txt", "foo(1);\nbar();\nfoo(2);\nfoo(3);\n");
  auto r = edit("f.txt", "foo", "baz", true);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(read_all(project_ / "f.txt"), "baz(1);\nbar();\nbaz(2);\nbaz(3);\n");
  EXPECT_EQ(r->metadata.at("replacements"), 3u);
  EXPECT_EQ(r->metadata.at("additions"), 3u);
  EXPECT_EQ(r->metadata.at("deletions"), 3u);
  EXPECT_TRUE(Contains(r->output, "Replaced 3 occurrences"));
}

TEST_F(EditTest, IdenticalStringsAreAnErrorBeforeAnythingIsAsked) {
  write_all(project_ / "f.txt", "same\n");
  auto r = edit("f.txt", "same", "same");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "No changes to apply: oldString and newString are identical.");
  EXPECT_TRUE(requests_.empty());
}

TEST_F(EditTest, AnEmptyOldStringCreatesANewFile) {
  auto r = edit("pkg/new.py", "", "print('hi')\n");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(read_all(project_ / "pkg/new.py"), "print('hi')\n");
  EXPECT_TRUE(Contains(std::string(r->metadata.at("diff").as_string()), "+print('hi')"));
  EXPECT_EQ(r->metadata.at("additions"), 1u);
  EXPECT_EQ(r->metadata.at("deletions"), 0u);
  EXPECT_EQ(asked_permissions(), std::vector<std::string>{"edit"});
}

TEST_F(EditTest, AnEmptyOldStringDoesNotOverwriteAFileWithContent) {
  write_all(project_ / "has.txt", "precious\n");
  auto r = edit("has.txt", "", "replacement\n");
  ASSERT_FALSE(r);
  EXPECT_TRUE(Contains(r.error().message, "already exists"));
  EXPECT_EQ(read_all(project_ / "has.txt"), "precious\n");

  // An empty file has nothing to lose.
  write_all(project_ / "empty.txt", "");
  ASSERT_TRUE(edit("empty.txt", "", "filled\n"));
  EXPECT_EQ(read_all(project_ / "empty.txt"), "filled\n");
}

TEST_F(EditTest, AMissingFileIsAnError) {
  auto r = edit("nope.txt", "a", "b");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::NotFound);
  EXPECT_TRUE(Contains(r.error().message, "File not found: " + (project_ / "nope.txt").string()));
  EXPECT_FALSE(fs::exists(project_ / "nope.txt"));
}

TEST_F(EditTest, CrlfFilesAcceptLfStringsAndKeepCrlf) {
  write_all(project_ / "win.txt", "a\r\nb\r\nc\r\nd\r\n");
  auto r = edit("win.txt", "b\nc\n", "B\nX\nC\n");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(read_all(project_ / "win.txt"), "a\r\nB\r\nX\r\nC\r\nd\r\n");
  // The diff is shown without carriage returns.
  std::string diff(r->metadata.at("diff").as_string());
  EXPECT_EQ(diff.find('\r'), std::string::npos);
  EXPECT_TRUE(Contains(diff, "-b\n-c\n+B\n+X\n+C\n"));

  // A CRLF oldString works too.
  ASSERT_TRUE(edit("win.txt", "X\r\n", ""));
  EXPECT_EQ(read_all(project_ / "win.txt"), "a\r\nB\r\nC\r\nd\r\n");
}

TEST_F(EditTest, MixedLineEndingsMatchTheTextAsSent) {
  write_all(project_ / "mixed.txt", "one\r\ntwo\nthree\n");
  ASSERT_TRUE(edit("mixed.txt", "two\nthree", "2\n3"));
  EXPECT_EQ(read_all(project_ / "mixed.txt"), "one\r\n2\n3\n");
}

TEST_F(EditTest, Utf8TextIsReplacedByteForByte) {
  write_all(project_ / "i18n.txt", "greeting = \"h\xC3\xA9llo w\xC3\xB6rld\"\n");
  auto r = edit("i18n.txt", "h\xC3\xA9llo w\xC3\xB6rld",
                "\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(read_all(project_ / "i18n.txt"),
            "greeting = \"\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\"\n");
}

TEST_F(EditTest, DeniedPermissionLeavesTheFileUntouched) {
  write_all(project_ / "f.txt", "keep me\n");
  deny("edit");
  auto r = edit("f.txt", "keep", "lose");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Forbidden);
  EXPECT_EQ(read_all(project_ / "f.txt"), "keep me\n");
}

TEST_F(EditTest, OutsideTheProjectAsksExternalDirectory) {
  write_all(outside_ / "o.txt", "old\n");
  deny("external_directory");
  auto r = edit((outside_ / "o.txt").string(), "old", "new");
  ASSERT_FALSE(r);
  EXPECT_EQ(asked_permissions(), std::vector<std::string>{"external_directory"});
  EXPECT_EQ(read_all(outside_ / "o.txt"), "old\n");

  requests_.clear();
  decide_ = nullptr;
  ASSERT_TRUE(edit("../outside/o.txt", "old", "new"));
  EXPECT_EQ(asked_permissions(), (std::vector<std::string>{"external_directory", "edit"}));
  EXPECT_EQ(read_all(outside_ / "o.txt"), "new\n");
}

TEST_F(EditTest, AFileChangedWhileWaitingForPermissionIsNotOverwritten) {
  write_all(project_ / "f.txt", "v1\n");
  decide_ = [this](const PermissionRequest&) {
    write_all(project_ / "f.txt", "v1\nsomeone else's change\n");
    return true;
  };
  auto r = edit("f.txt", "v1", "v2");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Conflict);
  EXPECT_EQ(read_all(project_ / "f.txt"), "v1\nsomeone else's change\n");
}

TEST_F(EditTest, ParallelEditsOfOneFileNeverLoseAChange) {
  // Two calls in one step: both read the file, both wait for permission, then both go on. The
  // second must not write its version over the first one's change.
  write_all(project_ / "f.txt", "alpha\nbeta\n");
  ctx_.ask = [](PermissionRequest) { return answer_later(std::chrono::milliseconds(20)); };
  asio::io_context io;
  std::optional<Result<ToolResult>> first, second;
  auto args = [](std::string from, std::string to) {
    return json::object{{"filePath", "f.txt"}, {"oldString", from}, {"newString", to}};
  };
  asio::co_spawn(io, store_result(edit_->execute(args("alpha", "ALPHA"), ctx_), first),
                 asio::detached);
  asio::co_spawn(io, store_result(edit_->execute(args("beta", "BETA"), ctx_), second),
                 asio::detached);
  io.run();
  ASSERT_TRUE(first && second);
  ASSERT_TRUE(*first) << (*first).error().message;
  ASSERT_FALSE(*second);
  EXPECT_EQ((*second).error().code, ErrorCode::Conflict);
  EXPECT_TRUE(Contains((*second).error().message, "Read it again"));
  EXPECT_EQ(read_all(project_ / "f.txt"), "ALPHA\nbeta\n");
}

TEST_F(EditTest, PublishesFileEdited) {
  write_all(project_ / "f.txt", "a\n");
  std::vector<bus::EventPtr> events;
  auto sub = bus_->subscribe([&](const bus::EventPtr& e) { events.push_back(e); });
  ASSERT_TRUE(edit("f.txt", "a", "b"));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]->type, "file.edited");
}

TEST(ReplaceExact, ErrorsAndCounts) {
  auto once = replace_exact("a b a", "b", "c", false);
  ASSERT_TRUE(once);
  EXPECT_EQ(once->content, "a c a");
  EXPECT_EQ(once->count, 1u);
  auto all = replace_exact("aaa", "a", "bb", true);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->content, "bbbbbb");
  EXPECT_EQ(all->count, 3u);
  // Non-overlapping, left to right.
  auto overlap = replace_exact("aaaa", "aa", "b", true);
  ASSERT_TRUE(overlap);
  EXPECT_EQ(overlap->content, "bb");
  EXPECT_FALSE(replace_exact("abc", "", "x", false));
  EXPECT_FALSE(replace_exact("abc", "b", "b", false));
  // Differing only in line endings is no change in a CRLF file.
  auto same = replace_exact("a\r\nb\r\n", "a\r\n", "a\n", false);
  ASSERT_FALSE(same);
  EXPECT_TRUE(Contains(same.error().message, "No changes to apply"));
}

// --- diff --------------------------------------------------------------------------------------

TEST(UnifiedDiff, HunksWithContextAndCounts) {
  auto d = fsutil::unified_diff("f", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n",
                                "1\n2\nTWO-B\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n14\n15\n");
  EXPECT_EQ(d.additions, 1u);
  EXPECT_EQ(d.deletions, 1u);
  EXPECT_EQ(d.patch,
            "--- f\n+++ f\n"
            "@@ -1,5 +1,6 @@\n 1\n 2\n+TWO-B\n 3\n 4\n 5\n"
            "@@ -10,6 +11,5 @@\n 10\n 11\n 12\n-13\n 14\n 15\n");
}

TEST(UnifiedDiff, CloseChangesShareAHunk) {
  auto d = fsutil::unified_diff("f", "a\nb\nc\nd\ne\nf\ng\nh\n", "A\nb\nc\nd\ne\nf\ng\nH\n");
  EXPECT_EQ(d.patch, "--- f\n+++ f\n@@ -1,8 +1,8 @@\n-a\n+A\n b\n c\n d\n e\n f\n g\n-h\n+H\n");
}

TEST(UnifiedDiff, NewFileAndMissingFinalNewline) {
  auto created = fsutil::unified_diff("n", "", "x\ny");
  EXPECT_EQ(created.patch, "--- n\n+++ n\n@@ -0,0 +1,2 @@\n+x\n+y\n\\ No newline at end of file\n");
  auto eol = fsutil::unified_diff("n", "x\n", "x");
  EXPECT_EQ(eol.patch, "--- n\n+++ n\n@@ -1,1 +1,1 @@\n-x\n+x\n\\ No newline at end of file\n");
  EXPECT_EQ(fsutil::unified_diff("n", "same", "same").patch, "");
}

TEST(UnifiedDiff, LargeRewritesStayCorrect) {
  std::string a, b;
  for (int i = 0; i < 6000; ++i) {
    a += "old " + std::to_string(i) + "\n";
    b += "new " + std::to_string(i) + "\n";
  }
  auto d = fsutil::unified_diff("big", a, b);
  EXPECT_EQ(d.additions, 6000u);
  EXPECT_EQ(d.deletions, 6000u);
  EXPECT_TRUE(Contains(d.patch, "@@ -1,6000 +1,6000 @@\n-old 0\n"));
}

// Applies a patch made by unified_diff to `before`; fails the test when a context or removed
// line does not match.
std::string apply_patch(const std::string& before, const std::string& patch) {
  std::vector<std::string> old;
  for (std::size_t start = 0; start < before.size();) {
    std::size_t nl = before.find('\n', start);
    std::size_t end = nl == std::string::npos ? before.size() : nl + 1;
    old.push_back(before.substr(start, end - start));
    start = end;
  }
  std::vector<std::string> lines;
  std::istringstream in(patch);
  for (std::string l; std::getline(in, l);)
    lines.push_back(l);
  std::string out;
  std::size_t pos = 0;
  for (std::size_t i = 2; i < lines.size();) {
    std::size_t old_start = 0, old_len = 0;
    EXPECT_EQ(std::sscanf(lines[i].c_str(), "@@ -%zu,%zu", &old_start, &old_len), 2) << lines[i];
    std::size_t at = old_len == 0 ? old_start : old_start - 1;
    for (; pos < at; ++pos)
      out += old.at(pos);
    for (++i; i < lines.size() && lines[i].rfind("@@", 0) != 0;) {
      char kind = lines[i][0];
      std::string text = lines[i].substr(1) + "\n";
      bool no_newline = i + 1 < lines.size() && lines[i + 1].rfind("\\", 0) == 0;
      if (no_newline) text.pop_back();
      if (kind == ' ' || kind == '-') {
        EXPECT_LT(pos, old.size());
        EXPECT_EQ(pos < old.size() ? old[pos] : "", text);
        ++pos;
      }
      if (kind == ' ' || kind == '+') out += text;
      i += no_newline ? 2 : 1;
    }
  }
  for (; pos < old.size(); ++pos)
    out += old[pos];
  return out;
}

TEST(UnifiedDiff, RandomEditsProducePatchesThatApply) {
  std::mt19937 rng(12345);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const char* words[] = {"a", "b", "c", "d", "{", "}"};
  for (int round = 0; round < 300; ++round) {
    std::vector<std::string> a;
    for (int i = pick(40); i > 0; --i)
      a.push_back(words[pick(6)]);
    std::vector<std::string> b = a;
    for (int e = pick(6); e > 0; --e) {
      int op = pick(3);
      if (op == 0 || b.empty())
        b.insert(b.begin() + pick(static_cast<int>(b.size()) + 1), words[pick(6)]);
      else if (op == 1)
        b.erase(b.begin() + pick(static_cast<int>(b.size())));
      else
        b[pick(static_cast<int>(b.size()))] = words[pick(6)];
    }
    auto join = [&](const std::vector<std::string>& v) {
      std::string out;
      for (const auto& l : v)
        out += l + "\n";
      if (!out.empty() && pick(4) == 0) out.pop_back();  // sometimes no final newline
      return out;
    };
    std::string before = join(a), after = join(b);
    auto d = fsutil::unified_diff("f", before, after);
    ASSERT_EQ(apply_patch(before, d.patch), after) << "round " << round << "\n" << d.patch;
    std::size_t plus = 0, minus = 0;
    std::istringstream in(d.patch);
    for (std::string l; std::getline(in, l);) {
      if (l.rfind("+++", 0) == 0 || l.rfind("---", 0) == 0) continue;
      if (!l.empty() && l[0] == '+') ++plus;
      if (!l.empty() && l[0] == '-') ++minus;
    }
    EXPECT_EQ(d.additions, plus);
    EXPECT_EQ(d.deletions, minus);
  }
}

// --- invalid -----------------------------------------------------------------------------------

TEST_F(ToolTest, InvalidToolTellsTheModelWhatWasWrong) {
  auto tool = make_invalid_tool();
  EXPECT_EQ(tool->id(), "invalid");
  auto r = call(*tool, R"({"tool": "read", "error": "/filePath is required"})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->title, "Invalid Tool");
  EXPECT_EQ(r->output.rfind("The arguments provided to the tool are invalid: /filePath is "
                            "required\n\n",
                            0),
            0u)
      << r->output;
  EXPECT_TRUE(Contains(r->output, "Correct the call"));
  EXPECT_EQ(r->metadata.at("tool"), "read");
}

TEST(UnknownToolError, SuggestsTheClosestNameAndListsTheTools) {
  std::vector<std::string> tools{"read", "write", "edit", "bash", "invalid"};
  EXPECT_EQ(unknown_tool_error("Read", tools),
            "unknown tool \"Read\": there is no tool with that name. Did you mean \"read\"? "
            "Available tools: bash, edit, read, write");
  EXPECT_TRUE(Contains(unknown_tool_error("reed", tools), "Did you mean \"read\"?"));
  EXPECT_FALSE(Contains(unknown_tool_error("kubectl", tools), "Did you mean"));
  EXPECT_TRUE(Contains(unknown_tool_error("x", {}), "No tools are available."));
}

// --- prepare_arguments -------------------------------------------------------------------------

class ArgumentsTest : public ::testing::Test {
 protected:
  ToolPtr read_ = make_read_tool();
  std::shared_ptr<TodoStore> store_ = std::make_shared<InMemoryTodoStore>();
  ToolPtr todowrite_ = make_todowrite_tool(store_);

  // A tool with just a schema, for the shapes the built-ins do not have.
  struct SchemaTool : BasicTool {
    explicit SchemaTool(std::string_view schema) : BasicTool("custom", "test tool", schema) {}
    asio::awaitable<Result<ToolResult>> execute(json::object, ToolContext&) override {
      co_return ToolResult{};
    }
  };
  Result<json::object> prepare(const Tool& tool, std::string_view args) {
    return prepare_arguments(tool, parse(args));
  }
};

TEST_F(ArgumentsTest, ValidArgumentsPassUnchanged) {
  auto a = prepare(*read_, R"({"filePath": "/x", "offset": 2, "limit": 10})");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(json::value(*a), parse(R"({"filePath": "/x", "offset": 2, "limit": 10})"));
}

TEST_F(ArgumentsTest, StringifiedArraysAndObjectsAreParsed) {
  auto a = prepare(
      *todowrite_,
      R"({"todos": "[{\"content\": \"x\", \"status\": \"pending\", \"priority\": \"high\", \"id\": \"1\"}]"})");
  ASSERT_TRUE(a) << a.error().message;
  ASSERT_TRUE(a->at("todos").is_array());
  EXPECT_EQ(a->at("todos").as_array()[0].at("content"), "x");

  SchemaTool tool(R"({"type": "object", "properties": {
      "options": {"type": "object", "properties": {"depth": {"type": "integer"}}}}})");
  auto o = prepare(tool, R"({"options": "{\"depth\": \"3\"}"})");
  ASSERT_TRUE(o) << o.error().message;
  // Coerced all the way down: the parsed object's "3" became 3.
  EXPECT_EQ(json::value(*o), parse(R"({"options": {"depth": 3}})"));
}

TEST_F(ArgumentsTest, NumbersAndBooleansSentAsStringsAreConverted) {
  auto a = prepare(*read_, R"({"filePath": "/x", "offset": "5", "limit": " 20 "})");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->at("offset"), 5);
  EXPECT_EQ(a->at("limit"), 20);

  SchemaTool tool(R"({"type": "object", "properties": {
      "ratio": {"type": "number"}, "force": {"type": "boolean"}, "n": {"type": "integer"}}})");
  auto b = prepare(tool, R"({"ratio": "2.5", "force": "True", "n": 7.0})");
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(b->at("ratio"), 2.5);
  EXPECT_EQ(b->at("force"), true);
  EXPECT_EQ(b->at("n"), 7);
}

TEST_F(ArgumentsTest, NumbersWhereStringsAreWantedBecomeText) {
  auto a =
      prepare(*todowrite_,
              R"({"todos": [{"content": "x", "status": "pending", "priority": "low", "id": 3}]})");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->at("todos").as_array()[0].at("id"), "3");
}

TEST_F(ArgumentsTest, StringsThatAreWantedAsStringsAreLeftAlone) {
  auto write = make_write_tool();
  auto a = prepare(*write, R"({"filePath": "/x.json", "content": "[1, 2, 3]"})");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->at("content"), "[1, 2, 3]");
}

TEST_F(ArgumentsTest, AlternativesInAnyOfAreCoercedToTheFittingOne) {
  SchemaTool tool(R"({"type": "object", "properties": {
      "ids": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}}]}}})");
  auto list = prepare(tool, R"({"ids": "[1, 2]"})");
  ASSERT_TRUE(list) << list.error().message;
  EXPECT_EQ(list->at("ids"), parse("[1, 2]"));
  auto one = prepare(tool, R"({"ids": "4"})");
  ASSERT_TRUE(one) << one.error().message;
  EXPECT_EQ(one->at("ids"), 4);
}

TEST_F(ArgumentsTest, LocalRefsAreFollowed) {
  SchemaTool tool(R"({"type": "object", "$defs": {"n": {"type": "integer"}},
      "properties": {"count": {"$ref": "#/$defs/n"}}, "required": ["count"]})");
  auto a = prepare(tool, R"({"count": "12"})");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->at("count"), 12);
}

TEST_F(ArgumentsTest, ArgumentsSentAsOneStringOrNothingAreAccepted) {
  auto a = prepare(*read_, R"("{\"filePath\": \"/x\"}")");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->at("filePath"), "/x");

  auto todoread = make_todoread_tool(store_);
  EXPECT_TRUE(prepare(*todoread, "null"));
  EXPECT_TRUE(prepare(*todoread, R"("")"));
}

TEST_F(ArgumentsTest, WrongTypeNamesThePathWhatWasExpectedAndWhatCame) {
  auto a = prepare(*read_, R"({"filePath": "/x", "offset": "ten"})");
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, ErrorCode::InvalidRequest);
  EXPECT_EQ(a.error().message,
            "the read tool was called with invalid arguments: /offset must be an integer, got "
            "the string \"ten\"");
}

TEST_F(ArgumentsTest, MissingRequiredPropertiesAreNamedWithWhatTheyAre) {
  auto a = prepare(*read_, R"({"offset": 1})");
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().message,
            "the read tool was called with invalid arguments: /filePath is required (a string: "
            "The absolute path to the file to read)");

  // Several problems are reported together, so one retry can fix them all.
  auto edit = make_edit_tool();
  auto b = prepare(*edit, R"({"filePath": ["a.txt"]})");
  ASSERT_FALSE(b);
  EXPECT_TRUE(Contains(b.error().message, "/oldString is required"));
  EXPECT_TRUE(Contains(b.error().message, "/newString is required"));
  EXPECT_TRUE(Contains(b.error().message, "/filePath must be a string, got an array"));
}

TEST_F(ArgumentsTest, EnumViolationsListTheAllowedValues) {
  auto a =
      prepare(*todowrite_,
              R"({"todos": [{"content": "x", "status": "done", "priority": "high", "id": "1"}]})");
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().message,
            "the todowrite tool was called with invalid arguments: /todos/0/status must be one of "
            "\"pending\", \"in_progress\", \"completed\", \"cancelled\", got the string \"done\"");

  // The same inside a stringified array.
  auto b = prepare(
      *todowrite_,
      R"({"todos": "[{\"content\": \"x\", \"status\": \"pending\", \"priority\": \"urgent\", \"id\": \"1\"}]"})");
  ASSERT_FALSE(b);
  EXPECT_TRUE(Contains(b.error().message, "/todos/0/priority must be one of \"high\""));
}

TEST_F(ArgumentsTest, StringifiedJsonOfTheWrongKindIsStillAnError) {
  auto a = prepare(*todowrite_, R"({"todos": "{\"content\": \"x\"}"})");
  ASSERT_FALSE(a);
  EXPECT_TRUE(Contains(a.error().message, "/todos must be an array, got the string"));
}

TEST_F(ArgumentsTest, BoundsUnexpectedPropertiesAndNonObjects) {
  auto low = prepare(*read_, R"({"filePath": "/x", "offset": -1})");
  ASSERT_FALSE(low);
  EXPECT_TRUE(Contains(low.error().message, "/offset must be at least 0, got -1"));

  SchemaTool strict(
      R"({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
      "additionalProperties": false})");
  auto extra = prepare(strict, R"({"a": "x", "c": 1})");
  ASSERT_FALSE(extra);
  EXPECT_TRUE(Contains(extra.error().message,
                       "/c is not a parameter of this tool; the parameters are: a, b"));

  auto array = prepare(*read_, "[1]");
  ASSERT_FALSE(array);
  EXPECT_TRUE(Contains(array.error().message, "the arguments must be a JSON object, got an array"));
}

TEST_F(ArgumentsTest, WhatOnlyValijsonUnderstandsStillNamesThePath) {
  SchemaTool tool(
      R"({"type": "object", "properties": {"tag": {"type": "string", "pattern": "^v[0-9]+$"}}})");
  auto a = prepare(tool, R"({"tag": "latest"})");
  ASSERT_FALSE(a);
  EXPECT_TRUE(
      Contains(a.error().message, "the custom tool was called with invalid arguments: /tag"));
}

// A tool's schema is compiled when the tool is made: one that is not an object schema is a
// programming error there, never a failure of a call.
TEST_F(ArgumentsTest, AToolWithAnUnusableSchemaCannotBeMade) {
  EXPECT_THROW(SchemaTool(R"({"type": "string"})"), std::logic_error);
}

TEST_F(ArgumentsTest, ConcurrentPreparationIsSafe) {
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        if (prepare_arguments(*read_, parse(R"({"filePath": "/x", "limit": "3"})"))) ++ok;
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(ok.load(), 800);
}

// --- todo --------------------------------------------------------------------------------------

class TodoTest : public ToolTest {
 protected:
  std::shared_ptr<bus::EventBus> bus_ = bus::EventBus::create();
  std::shared_ptr<TodoStore> store_ = std::make_shared<InMemoryTodoStore>();
  asio::io_context io_;
  // The stored list, as the tools read it.
  Result<std::vector<Todo>> stored_list(std::string session_id) {
    return run_to_end(io_, store_->get(std::move(session_id)));
  }
  ToolPtr write_ = make_todowrite_tool(store_, bus_);
  ToolPtr read_ = make_todoread_tool(store_);
  static constexpr std::string_view kList = R"([
    {"content": "Write the parser", "status": "completed", "priority": "high", "id": "1"},
    {"content": "Test the parser", "status": "in_progress", "priority": "high", "id": "2"},
    {"content": "Document it", "status": "pending", "priority": "low", "id": "3"}
  ])";
};

TEST_F(TodoTest, WriteStoresPublishesAndAnswersWithTheList) {
  std::vector<bus::EventPtr> events;
  auto sub = bus_->subscribe([&](const bus::EventPtr& e) { events.push_back(e); });
  auto r = call(*write_, json::object{{"todos", parse(kList)}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->title, "2 todos");
  EXPECT_EQ(parse(r->output), parse(kList));
  EXPECT_TRUE(Contains(r->output, "[\n  {\n    \"content\": \"Write the parser\","));
  EXPECT_EQ(r->metadata.at("todos"), parse(kList));

  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]->type, "todo.updated");
  EXPECT_EQ(events[0]->properties.at("sessionID"), "ses_test");
  EXPECT_EQ(events[0]->properties.at("todos"), parse(kList));

  auto stored = stored_list("ses_test");
  ASSERT_TRUE(stored);
  ASSERT_EQ(stored->size(), 3u);
  EXPECT_EQ((*stored)[1], (Todo{"Test the parser", "in_progress", "high", "2"}));
}

TEST_F(TodoTest, ReadReturnsTheSessionsListAndNothingOfOtherSessions) {
  ASSERT_TRUE(call(*write_, json::object{{"todos", parse(kList)}}));
  auto r = call(*read_, "{}");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->title, "2 todos");
  EXPECT_EQ(parse(r->output), parse(kList));

  ctx_.session_id = "ses_other";
  auto other = call(*read_, "{}");
  ASSERT_TRUE(other) << other.error().message;
  EXPECT_EQ(other->title, "0 todos");
  EXPECT_EQ(other->output, "[]");
}

TEST_F(TodoTest, WriteReplacesTheWholeList) {
  ASSERT_TRUE(call(*write_, json::object{{"todos", parse(kList)}}));
  auto r = call(
      *write_,
      R"({"todos": [{"content": "Only this", "status": "cancelled", "priority": "medium", "id": "9"}]})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->title, "1 todos");  // cancelled is not completed, as OpenCode counts
  auto stored = stored_list("ses_test");
  ASSERT_TRUE(stored);
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].id, "9");

  auto cleared = call(*write_, R"({"todos": []})");
  ASSERT_TRUE(cleared) << cleared.error().message;
  EXPECT_EQ(cleared->title, "0 todos");
  EXPECT_EQ(cleared->output, "[]");
  EXPECT_TRUE(stored_list("ses_test")->empty());
}

TEST_F(TodoTest, ExecuteChecksItemsItselfWhenCalledDirectly) {
  json::object args{
      {"todos", parse(R"([{"content": "x", "status": "doing", "priority": "high", "id": "1"}])")}};
  auto r = run_io(write_->execute(std::move(args), ctx_));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "todos[0].status must be one of pending, in_progress, completed, cancelled, got "
            "\"doing\"");
  auto stored = stored_list("ses_test");
  ASSERT_TRUE(stored);
  EXPECT_TRUE(stored->empty());
}

TEST(InMemoryTodoStore, KeepsOneListPerSessionAndDropsAnEmptyOne) {
  InMemoryTodoStore store;
  asio::io_context io;
  for (int i = 0; i < 500; ++i) {
    std::string session = "ses_" + std::to_string(i % 2);
    ASSERT_TRUE(
        run_to_end(io, store.set(session, {Todo{"c" + std::to_string(i), "pending", "low", "1"}})));
    auto got = run_to_end(io, store.get(session));
    ASSERT_TRUE(got);
    ASSERT_EQ(got->size(), 1u);
    EXPECT_EQ((*got)[0].content, "c" + std::to_string(i));  // set replaces the whole list
  }
  EXPECT_EQ(run_to_end(io, store.get("ses_0"))->at(0).content, "c498");
  EXPECT_EQ(run_to_end(io, store.get("ses_1"))->at(0).content, "c499");
  ASSERT_TRUE(run_to_end(io, store.set("ses_0", {})));
  EXPECT_TRUE(run_to_end(io, store.get("ses_0"))->empty());
  EXPECT_EQ(run_to_end(io, store.get("ses_1"))->size(), 1u);
}

}  // namespace
}  // namespace sb::tool
