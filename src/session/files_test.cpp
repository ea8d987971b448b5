#include "session/files.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "util/base64.hpp"

namespace sb::session {
namespace {

namespace fs = std::filesystem;

// A 1x1 PNG.
const std::string kPng = *base64_decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC");

TEST(DataUrl, DecodesBase64AndPercentEncodedData) {
  EXPECT_EQ(*decode_data_url("data:text/plain;base64,aGVsbG8=", 100), "hello");
  EXPECT_EQ(*decode_data_url("DATA:text/plain;BASE64,aGVs\nbG8=", 100), "hello");
  EXPECT_EQ(*decode_data_url("data:text/plain,hello%20there", 100), "hello there");
  EXPECT_EQ(*decode_data_url("data:,a,b", 100), "a,b");
  EXPECT_EQ(*decode_data_url("data:text/plain;base64,", 100), "");
}

TEST(DataUrl, RefusesMalformedOnes) {
  auto no_comma = decode_data_url("data:text/plain;base64", 100);
  ASSERT_FALSE(no_comma);
  EXPECT_EQ(no_comma.error().code, ErrorCode::InvalidRequest);
  EXPECT_NE(no_comma.error().message.find("no ','"), std::string::npos);
  auto not_base64 = decode_data_url("data:image/png;base64,ab!d", 100);
  ASSERT_FALSE(not_base64);
  EXPECT_NE(not_base64.error().message.find("not base64"), std::string::npos);
  EXPECT_FALSE(decode_data_url("data:image/png;base64,abc", 100));  // not a multiple of 4
  auto bad_escape = decode_data_url("data:text/plain,100%", 100);
  ASSERT_FALSE(bad_escape);
  EXPECT_EQ(bad_escape.error().code, ErrorCode::InvalidRequest);
  EXPECT_FALSE(decode_data_url("http://x/a.png", 100));
}

TEST(DataUrl, RefusesMoreThanTheLimit) {
  auto big = decode_data_url("data:text/plain;base64," + base64_encode(std::string(101, 'x')), 100);
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code, ErrorCode::TooLarge);
  EXPECT_TRUE(
      decode_data_url("data:text/plain;base64," + base64_encode(std::string(100, 'x')), 100));
  auto plain = decode_data_url("data:text/plain," + std::string(101, 'x'), 100);
  ASSERT_FALSE(plain);
  EXPECT_EQ(plain.error().code, ErrorCode::TooLarge);
}

TEST(FileUrl, TakesFileUrlsAndPaths) {
  EXPECT_EQ(*file_url_path("file:///p/a%20b.txt", "/x"), fs::path("/p/a b.txt"));
  EXPECT_EQ(*file_url_path("file://localhost/p/a.txt", "/x"), fs::path("/p/a.txt"));
  EXPECT_EQ(*file_url_path("src/../a.txt", "/proj"), fs::path("/proj/a.txt"));
  EXPECT_EQ(*file_url_path("/etc/hostname", "/proj"), fs::path("/etc/hostname"));
  EXPECT_FALSE(file_url_path("file://example.com/a.txt", "/x"));
  auto https = file_url_path("https://example.com/a.png", "/x");
  ASSERT_FALSE(https);
  EXPECT_NE(https.error().message.find("\"https:\""), std::string::npos);
  EXPECT_FALSE(file_url_path("", "/x"));
}

TEST(FileKinds, ByMimeType) {
  EXPECT_EQ(file_kind("text/plain"), FileKind::Text);
  EXPECT_EQ(file_kind("Text/Markdown; charset=utf-8"), FileKind::Text);
  EXPECT_EQ(file_kind("application/json"), FileKind::Text);
  EXPECT_EQ(file_kind("application/vnd.api+json"), FileKind::Text);
  EXPECT_EQ(file_kind("image/png"), FileKind::Image);
  EXPECT_EQ(file_kind("image/webp"), FileKind::Image);
  EXPECT_EQ(file_kind("application/pdf"), FileKind::Pdf);
  EXPECT_EQ(file_kind("application/x-directory"), FileKind::Directory);
  EXPECT_EQ(file_kind("application/octet-stream"), std::nullopt);
  EXPECT_EQ(file_kind("image/bmp"), std::nullopt);
}

class ResolveFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("sb_files_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "proj" / "sub");
    write(root_ / "proj" / "notes.txt", "hello file\nline2\n");
    write(root_ / "proj" / "one.png", kPng);
    write(root_ / "outside.txt", "secret");
    fs::create_symlink(root_ / "outside.txt", root_ / "proj" / "escape.txt");
  }
  void TearDown() override { fs::remove_all(root_); }

  static void write(const fs::path& p, const std::string& content) {
    std::ofstream(p, std::ios::binary) << content;
  }
  Result<std::vector<std::vector<Part>>> resolve(std::vector<FileInput> files,
                                                 FileOptions options = {},
                                                 provider::InputKinds accepts = {}) {
    return resolve_files(files, {}, root_ / "proj", options, accepts);
  }

  fs::path root_;
};

TEST_F(ResolveFiles, TextFileBecomesSyntheticTextBesideItsPart) {
  auto parts = resolve({{"text/plain", "data:text/plain;base64,aGVsbG8KeA==", "a.txt", {}}});
  ASSERT_TRUE(parts) << parts.error().message;
  ASSERT_EQ(parts->size(), 1u);
  const auto& p = parts->front();
  ASSERT_EQ(p.size(), 3u);
  EXPECT_TRUE(p[0].synthetic);
  EXPECT_EQ(p[0].text, R"(Called the Read tool with the following input: {"filePath":"a.txt"})");
  EXPECT_EQ(p[1].text, "<file>\n00001| hello\n00002| x\n\n(End of file - total 2 lines)\n</file>");
  EXPECT_EQ(p[2].type, Part::Type::File);
  EXPECT_EQ(p[2].url, "data:text/plain;base64,aGVsbG8KeA==");
  EXPECT_EQ(p[2].filename, "a.txt");
  EXPECT_FALSE(attachment_of(p[2]));
}

TEST_F(ResolveFiles, FileUrlOfATextFileIsReadOnce) {
  auto url = "file://" + (root_ / "proj" / "notes.txt").string();
  auto parts = resolve({{"text/plain", url, "", {}}});
  ASSERT_TRUE(parts) << parts.error().message;
  const auto& p = parts->front();
  ASSERT_EQ(p.size(), 3u);
  EXPECT_NE(p[1].text.find("00001| hello file"), std::string::npos);
  EXPECT_EQ(p[2].url, url);  // the content is in the text part: the url stays
  EXPECT_EQ(p[2].filename, "notes.txt");
}

TEST_F(ResolveFiles, ImagesBecomeDataUrlsAndAttachments) {
  auto parts = resolve({{"image/png", "one.png", "", {}}});
  ASSERT_TRUE(parts) << parts.error().message;
  const auto& p = parts->front();
  ASSERT_EQ(p.size(), 2u);  // the read note, the file part
  EXPECT_EQ(p[1].url, "data:image/png;base64," + base64_encode(kPng));
  auto a = attachment_of(p[1]);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->kind, provider::Attachment::Kind::Image);
  EXPECT_EQ(a->base64(), base64_encode(kPng));
  EXPECT_EQ(a->filename, "one.png");

  auto sent = resolve({{"image/png", "data:image/png;base64," + base64_encode(kPng), "x.png", {}}});
  ASSERT_TRUE(sent);
  EXPECT_EQ(sent->front().size(), 1u);
}

TEST_F(ResolveFiles, RefusesWhatIsNotWhatItSays) {
  auto fake = resolve({{"image/png", "data:image/png;base64,aGVsbG8=", "x.png", {}}});
  ASSERT_FALSE(fake);
  EXPECT_NE(fake.error().message.find("parts[0] (x.png): x.png is not a image/png image"),
            std::string::npos)
      << fake.error().message;
  auto binary = resolve({{"text/plain", "data:text/plain;base64,AAEC", "b", {}}});
  ASSERT_FALSE(binary);
  EXPECT_NE(binary.error().message.find("is not text"), std::string::npos);
  auto unknown = resolve({{"application/zip", "data:application/zip;base64,AAEC", "z", {}}});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("\"application/zip\" are not taken"), std::string::npos);
  EXPECT_FALSE(resolve({{"text/plain", "data:text/plain;base64,%%", "", {}}}));
  EXPECT_FALSE(resolve({{"text/plain", "nope.txt", "", {}}}));
}

TEST_F(ResolveFiles, EmptyTextFileIsSaidToBeEmpty) {
  auto parts = resolve({{"text/plain", "data:text/plain;base64,", "e.txt", {}}});
  ASSERT_TRUE(parts);
  EXPECT_EQ(parts->front()[1].text, "<file>\n(This file exists but is empty.)\n</file>");
}

TEST_F(ResolveFiles, StaysInsideTheProject) {
  auto outside = resolve({{"text/plain", (root_ / "outside.txt").string(), "", {}}});
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.error().code, ErrorCode::InvalidRequest);
  EXPECT_NE(outside.error().message.find("outside the project directory"), std::string::npos);
  auto link = resolve({{"text/plain", "escape.txt", "", {}}});
  ASSERT_FALSE(link);
  EXPECT_NE(link.error().message.find("outside the project"), std::string::npos);
  EXPECT_FALSE(resolve({{"text/plain", "sub/../../outside.txt", "", {}}}));
}

TEST_F(ResolveFiles, DirectoryIsListed) {
  auto parts =
      resolve({{"application/x-directory", "file://" + (root_ / "proj").string(), "", {}}});
  ASSERT_TRUE(parts) << parts.error().message;
  const auto& p = parts->front();
  ASSERT_EQ(p.size(), 3u);
  EXPECT_NE(p[1].text.find("notes.txt\none.png"), std::string::npos) << p[1].text;
  EXPECT_NE(p[1].text.find("sub/"), std::string::npos);
  EXPECT_EQ(p[2].mime, "application/x-directory");
  EXPECT_FALSE(resolve({{"application/x-directory", "data:,x", "", {}}}));
}

TEST_F(ResolveFiles, LimitsNameTheirKeys) {
  FileOptions small{.max_file_bytes = 10, .max_prompt_bytes = 20};
  auto one = resolve({{"text/plain", "notes.txt", "", {}}}, small);
  ASSERT_FALSE(one);
  EXPECT_EQ(one.error().code, ErrorCode::TooLarge);
  EXPECT_NE(one.error().message.find("files.maxBytes"), std::string::npos);
  auto data = resolve({{"text/plain", "data:text/plain,0123456789x", "", {}}}, small);
  ASSERT_FALSE(data);
  EXPECT_EQ(data.error().code, ErrorCode::TooLarge);
  FileInput nine{"text/plain", "data:text/plain,012345678", "", {}};
  auto all = resolve({nine, nine, nine}, small);
  ASSERT_FALSE(all);
  EXPECT_EQ(all.error().code, ErrorCode::TooLarge);
  EXPECT_NE(all.error().message.find("parts[2]: the prompt's files come to 27 bytes, over "
                                     "files.maxPromptBytes (20 bytes)"),
            std::string::npos)
      << all.error().message;
}

TEST_F(ResolveFiles, DirectoryListingsCountAgainstThePromptBytes) {
  FileInput dir{"application/x-directory", "file://" + (root_ / "proj").string(), "", {}};
  auto one = resolve({dir});
  ASSERT_TRUE(one) << one.error().message;
  std::size_t listing = one->front()[1].text.size();
  FileOptions tight{.max_prompt_bytes = listing * 2 + 1};
  ASSERT_TRUE(resolve({dir, dir}, tight));
  auto three = resolve({dir, dir, dir}, tight);
  ASSERT_FALSE(three);
  EXPECT_EQ(three.error().code, ErrorCode::TooLarge);
  EXPECT_NE(three.error().message.find("parts[2]: the prompt's files come to"), std::string::npos)
      << three.error().message;
  EXPECT_NE(three.error().message.find("files.maxPromptBytes"), std::string::npos);
}

TEST_F(ResolveFiles, FilePartsPerPromptAreBounded) {
  FileInput dir{"application/x-directory", "file://" + (root_ / "proj").string(), "", {}};
  auto most = resolve(std::vector<FileInput>(kMaxPromptFiles, dir));
  ASSERT_TRUE(most) << most.error().message;
  EXPECT_EQ(most->size(), kMaxPromptFiles);
  auto over = resolve(std::vector<FileInput>(kMaxPromptFiles + 1, dir));
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code, ErrorCode::TooLarge);
  EXPECT_EQ(over.error().message, "the prompt has 101 file parts, over the 100 a prompt may hold");
}

TEST_F(ResolveFiles, AModelWithoutImagesIsNamed) {
  auto refused = resolve({{"image/png", "one.png", "", {}}}, {}, {.image = false, .pdf = true});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("does not take images"), std::string::npos);
}

TEST(FileOptionsConfig, ReadsTheFilesKeys) {
  auto doc = parse_json(R"({"files": {"maxBytes": 100, "maxPromptBytes": 200}})");
  auto o = file_options(doc->get_object());
  ASSERT_TRUE(o);
  EXPECT_EQ(o->max_file_bytes, 100u);
  EXPECT_EQ(o->max_prompt_bytes, 200u);
  auto bad = file_options(parse_json(R"({"files": {"maxBytes": 0}})")->get_object());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("files.maxBytes"), std::string::npos);
  EXPECT_EQ(file_options(json::object{})->max_file_bytes, std::size_t{5} << 20);
}

}  // namespace
}  // namespace sb::session
