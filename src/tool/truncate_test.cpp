#include "tool/truncate.hpp"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tool/tool_test_helpers.hpp"
#include "util/text.hpp"

namespace sb::tool {
namespace {

namespace fs = std::filesystem;

using testing::Contains;
using testing::read_all;

// "line 1\nline 2\n...line n\n"
std::string numbered_lines(std::size_t n) {
  std::string out;
  for (std::size_t i = 1; i <= n; ++i)
    out += "line " + std::to_string(i) + "\n";
  return out;
}

std::vector<fs::path> files_under(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  for (auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out.push_back(e.path());
  return out;
}

// The part of the content before the note.
std::string head_of(const std::string& content) {
  auto at = content.find("\n\n[Output truncated");
  return at == std::string::npos ? content.substr(0, content.find("[Output truncated"))
                                 : content.substr(0, at);
}

class TruncateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "sb_truncate_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    options_.dir = root_ / "truncate";
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(root_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(root_, ec);
  }

  fs::path root_;
  TruncateOptions options_;
};

TEST_F(TruncateTest, SmallOutputComesBackUnchangedAndNothingIsWritten) {
  std::string out = numbered_lines(10);
  auto r = truncate_output(out, "ses_1", "bash", options_);
  EXPECT_FALSE(r.truncated);
  EXPECT_EQ(r.content, out);
  EXPECT_FALSE(r.output_path.has_value());
  EXPECT_FALSE(r.save_error.has_value());
  EXPECT_TRUE(files_under(options_.dir).empty());
}

TEST_F(TruncateTest, OutputExactlyAtTheLimitsIsNotTruncated) {
  std::string lines = numbered_lines(2000);
  EXPECT_FALSE(truncate_output(lines, "ses_1", "bash", options_).truncated);
  // The final newline does not start another line.
  std::string no_final_newline = lines.substr(0, lines.size() - 1);
  EXPECT_FALSE(truncate_output(no_final_newline, "ses_1", "bash", options_).truncated);
  std::string bytes(51200, 'x');
  EXPECT_FALSE(truncate_output(bytes, "ses_1", "bash", options_).truncated);
  EXPECT_FALSE(truncate_output(bytes + "\n", "ses_1", "bash", options_).truncated);
  EXPECT_TRUE(truncate_output(bytes + "x", "ses_1", "bash", options_).truncated);
  EXPECT_TRUE(truncate_output(bytes + "\nx", "ses_1", "bash", options_).truncated);
  EXPECT_TRUE(truncate_output(lines + "one more", "ses_1", "bash", options_).truncated);
}

TEST_F(TruncateTest, OverTheLineLimitKeepsTheFirstLinesAndSavesEverything) {
  std::string out = numbered_lines(3000);
  auto r = truncate_output(out, "ses_1", "bash", options_);
  ASSERT_TRUE(r.truncated);
  ASSERT_TRUE(r.output_path.has_value());
  EXPECT_FALSE(r.save_error.has_value());

  std::string head = head_of(r.content);
  std::string first_2000 = numbered_lines(2000);
  EXPECT_EQ(head, first_2000.substr(0, first_2000.size() - 1));
  EXPECT_FALSE(Contains(r.content, "line 2001\n"));

  // The full output is in the file, byte for byte.
  EXPECT_EQ(read_all(*r.output_path), out);
  EXPECT_EQ(r.output_path->parent_path(), options_.dir / "ses_1");
  std::string name = r.output_path->filename().string();
  EXPECT_TRUE(name.starts_with("tool_bash_")) << name;
  EXPECT_TRUE(name.ends_with(".txt")) << name;

  std::string path = r.output_path->string();
  EXPECT_TRUE(
      Contains(r.content, "[Output truncated after 2,000 lines. Full output (3,000 lines, "));
  EXPECT_TRUE(Contains(r.content, "written to:\n" + path + "\n"));
  EXPECT_TRUE(Contains(r.content, "read(filePath=\"" + path + "\", offset=2000, limit=2000)"));
  EXPECT_TRUE(r.content.ends_with("]"));
}

TEST_F(TruncateTest, OverTheByteLimitKeepsWholeLinesUnderIt) {
  // 100 lines of 1000 characters: 51 of them and the 50 newlines between them take 51,050
  // bytes; a 52nd line would need 52,051.
  std::string line(1000, 'y');
  std::string out;
  for (int i = 0; i < 100; ++i)
    out += line + "\n";
  auto r = truncate_output(out, "ses_1", "read", options_);
  ASSERT_TRUE(r.truncated);
  std::string head = head_of(r.content);
  EXPECT_LE(head.size(), 51200u);
  std::string want;
  for (int i = 0; i < 51; ++i)
    want += line + "\n";
  want.pop_back();
  EXPECT_EQ(head, want);
  EXPECT_TRUE(Contains(r.content,
                       "[Output truncated after 51,050 bytes (51 lines). Full output (100 lines, "
                       "98 KB) written to:"));
  EXPECT_TRUE(Contains(r.content, "offset=51, limit=2000)"));
  ASSERT_TRUE(r.output_path.has_value());
  EXPECT_EQ(read_all(*r.output_path), out);
}

TEST_F(TruncateTest, TheHeadNeverExceedsTheByteLimit) {
  std::string out = "aaaa\naaaa\naaaa\n";
  options_.limits.max_bytes = 9;  // "aaaa\naaaa" is exactly 9 bytes
  EXPECT_EQ(head_of(truncate_output(out, "ses_1", "bash", options_).content), "aaaa\naaaa");
  options_.limits.max_bytes = 8;
  EXPECT_EQ(head_of(truncate_output(out, "ses_1", "bash", options_).content), "aaaa");
}

TEST_F(TruncateTest, CustomLimits) {
  options_.limits = {.max_lines = 3, .max_bytes = 1000};
  auto r = truncate_output("a\nb\nc\nd\n", "ses_1", "bash", options_);
  ASSERT_TRUE(r.truncated);
  EXPECT_TRUE(
      r.content.starts_with("a\nb\nc\n\n[Output truncated after 3 lines. Full output (4 "
                            "lines, 8 bytes) written to:"))
      << r.content;
  EXPECT_FALSE(truncate_output("a\nb\nc\n", "ses_1", "bash", options_).truncated);
}

TEST_F(TruncateTest, ALineLongerThanTheBudgetIsCutAtACharacterBoundary) {
  options_.limits.max_bytes = 11;
  std::string e_acute = "\xC3\xA9";  // 2 bytes
  std::string out;
  for (int i = 0; i < 20; ++i)
    out += e_acute;
  auto r = truncate_output(out, "ses_1", "bash", options_);
  ASSERT_TRUE(r.truncated);
  std::string head = head_of(r.content);
  EXPECT_EQ(head, out.substr(0, 10));  // 5 characters; the 6th would need byte 12
  EXPECT_TRUE(is_valid_utf8(r.content));
  EXPECT_TRUE(Contains(r.content, "[Output truncated after 10 bytes (part of line 1)."));
  EXPECT_TRUE(Contains(r.content, "offset=0,"));

  options_.limits.max_bytes = 10;
  std::string emoji = "\xF0\x9F\x98\x80";  // 4 bytes
  std::string faces;
  for (int i = 0; i < 5; ++i)
    faces += emoji;
  auto f = truncate_output(faces, "ses_1", "bash", options_);
  EXPECT_EQ(head_of(f.content), faces.substr(0, 8));
  EXPECT_TRUE(is_valid_utf8(f.content));
  ASSERT_TRUE(f.output_path.has_value());
  EXPECT_EQ(read_all(*f.output_path), faces);
}

TEST_F(TruncateTest, MultibyteLinesStayWhole) {
  options_.limits.max_bytes = 20;
  std::string out = "日本語\n日本語\n日本語\n";  // 10 bytes per line with the newline
  auto r = truncate_output(out, "ses_1", "bash", options_);
  ASSERT_TRUE(r.truncated);
  EXPECT_EQ(head_of(r.content), "日本語\n日本語");
  EXPECT_TRUE(is_valid_utf8(r.content));
}

TEST_F(TruncateTest, EachTruncationGetsItsOwnFile) {
  std::string out = numbered_lines(2500);
  auto a = truncate_output(out, "ses_1", "bash", options_);
  auto b = truncate_output(out + "x", "ses_1", "bash", options_);
  ASSERT_TRUE(a.output_path && b.output_path);
  EXPECT_NE(*a.output_path, *b.output_path);
  EXPECT_EQ(read_all(*a.output_path), out);
  EXPECT_EQ(read_all(*b.output_path), out + "x");
}

TEST_F(TruncateTest, UnsafeSessionAndToolNamesStayInsideTheDirectory) {
  auto r = truncate_output(numbered_lines(2500), "../../etc", "mcp/evil tool", options_);
  ASSERT_TRUE(r.output_path.has_value()) << r.content;
  fs::path canonical = fs::weakly_canonical(*r.output_path);
  fs::path dir = fs::weakly_canonical(options_.dir);
  EXPECT_TRUE(canonical.string().starts_with(dir.string() + "/")) << canonical;
  EXPECT_TRUE(r.output_path->filename().string().starts_with("tool_mcp_evil_tool_"));
  EXPECT_EQ(files_under(root_).size(), 1u);
}

TEST_F(TruncateTest, AnUncreatableDirectoryStillReturnsTheHead) {
  // A regular file where the directory should be: create_directories fails even for root.
  fs::path blocker = root_ / "not_a_dir";
  std::ofstream(blocker) << "x";
  options_.dir = blocker / "truncate";
  std::string out = numbered_lines(3000);
  auto r = truncate_output(out, "ses_1", "bash", options_);
  ASSERT_TRUE(r.truncated);
  EXPECT_FALSE(r.output_path.has_value());
  ASSERT_TRUE(r.save_error.has_value());
  EXPECT_TRUE(Contains(*r.save_error, blocker.string()));
  std::string first_2000 = numbered_lines(2000);
  EXPECT_EQ(head_of(r.content), first_2000.substr(0, first_2000.size() - 1));
  EXPECT_TRUE(Contains(r.content,
                       "[Output truncated after 2,000 lines. The full output (3,000 "
                       "lines, "));
  EXPECT_TRUE(Contains(r.content, "could not be saved (" + *r.save_error + ")"));
  EXPECT_FALSE(Contains(r.content, "read(filePath="));
}

TEST_F(TruncateTest, AReadOnlyDirectoryStillReturnsTheHead) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories";
  fs::create_directories(options_.dir);
  fs::permissions(options_.dir, fs::perms::owner_read | fs::perms::owner_exec);
  auto r = truncate_output(numbered_lines(3000), "ses_1", "bash", options_);
  ASSERT_TRUE(r.truncated);
  EXPECT_FALSE(r.output_path.has_value());
  ASSERT_TRUE(r.save_error.has_value());
  EXPECT_TRUE(Contains(*r.save_error, "Permission denied"));
  EXPECT_TRUE(Contains(r.content, "could not be saved"));
}

TEST_F(TruncateTest, AFullDiskLeavesNoPartialFile) {
  // RLIMIT_FSIZE makes write() fail part-way (EFBIG) the way a full disk does, through the real
  // writer. SIGXFSZ would kill the process, so it is ignored for the duration.
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  auto r = truncate_output(numbered_lines(3000), "ses_1", "bash", options_);
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);

  ASSERT_TRUE(r.truncated);
  EXPECT_FALSE(r.output_path.has_value());
  ASSERT_TRUE(r.save_error.has_value());
  EXPECT_TRUE(Contains(*r.save_error, "cannot write"));
  EXPECT_TRUE(Contains(*r.save_error, "File too large"));
  EXPECT_TRUE(Contains(r.content, "could not be saved"));
  EXPECT_TRUE(files_under(options_.dir).empty());
}

TEST_F(TruncateTest, TheInjectedWriterGetsThePathAndTheFullOutput) {
  fs::path seen_path;
  std::string seen_content;
  options_.write = [&](const fs::path& p, std::string_view content) -> Result<void> {
    seen_path = p;
    seen_content = content;
    return make_error(ErrorCode::Internal, "No space left on device");
  };
  std::string out = numbered_lines(2001);
  auto r = truncate_output(out, "ses_9", "grep", options_);
  EXPECT_EQ(seen_content, out);
  EXPECT_EQ(seen_path.parent_path(), options_.dir / "ses_9");
  EXPECT_EQ(r.save_error, "No space left on device");
  EXPECT_TRUE(Contains(r.content, "could not be saved (No space left on device)"));
}

TEST_F(TruncateTest, WriteFileRefusesToOverwrite) {
  fs::path p = root_ / "a" / "b" / "out.txt";
  ASSERT_TRUE(write_file(p, "first").has_value());
  EXPECT_EQ(read_all(p), "first");
  auto again = write_file(p, "second");
  ASSERT_FALSE(again.has_value());
  EXPECT_TRUE(Contains(again.error().message, p.string()));
  EXPECT_EQ(read_all(p), "first");
}

}  // namespace
}  // namespace sb::tool
