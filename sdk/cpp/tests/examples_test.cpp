// The example programs under examples/cpp, run as a user runs them, against the real server
// and its scripted model.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <sys/wait.h>

#include <cstdio>

#include "sdk_test_util.hpp"

namespace switchboard::test {
namespace {

struct ProgramRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

std::string quoted(const std::string& arg) {
  std::string out = "'";
  for (char c : arg)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The examples keep their client token in a file; each test gets its own (removed after it).
ProgramRun run_program(std::vector<std::string> args, const std::filesystem::path& token_dir) {
  args.push_back("--token-file");
  args.push_back((token_dir / "client.token").string());
  std::string command = "timeout 20";
  for (const auto& a : args)
    command.append(" ").append(quoted(a));
  command += " 2>&1";
  ProgramRun r;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + command);
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0)
    r.output.append(buf, n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void sql(sqlite3* db, const char* text) {
  char* error = nullptr;
  if (sqlite3_exec(db, text, nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error ? error : "?";
    sqlite3_free(error);
    throw std::runtime_error(message);
  }
}

int count_rows(const std::string& file) {
  sqlite3* db = nullptr;
  sqlite3_open(file.c_str(), &db);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "SELECT count(*) FROM fruit", -1, &stmt, nullptr);
  int n = sqlite3_step(stmt) == SQLITE_ROW ? sqlite3_column_int(stmt, 0) : -1;
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return n;
}

TEST_F(SdkTest, GetLocalTimeAnswersInTheAskedTimezone) {
  start(test_config());
  sb::test::TempDir tokens;
  ProgramRun r = run_program({EXAMPLE_GET_LOCAL_TIME, "--url", url(), "--prompt",
                              R"(/call client_example-time_get_local_time {"timezone": "UTC"})"},
                             tokens.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Tool results:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" UTC"), std::string::npos) << r.output;
  // The second run is the same client: it presents the token the first one kept.
  r = run_program({EXAMPLE_GET_LOCAL_TIME, "--url", url(), "--prompt",
                   R"(/call client_example-time_get_local_time {"timezone": "../../etc/passwd"})"},
                  tokens.path());
  EXPECT_NE(r.output.find("Unknown timezone"), std::string::npos) << r.output;
}

TEST_F(SdkTest, ReadLocalFileReadsBelowItsRootOnly) {
  start(test_config());
  sb::test::TempDir dir;
  sb::test::TempDir tokens;
  sb::test::write_file(dir.path() / "notes.txt", "remember the milk");
  ProgramRun r = run_program(
      {EXAMPLE_READ_LOCAL_FILE, "--url", url(), "--root", dir.path().string(), "--prompt",
       R"(/call client_example-files_read_local_file {"path": "notes.txt"})"},
      tokens.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("remember the milk"), std::string::npos) << r.output;
  r = run_program(
      {EXAMPLE_READ_LOCAL_FILE, "--url", url(), "--root", dir.path().string(), "--prompt",
       R"(/call client_example-files_read_local_file {"path": "../../../../etc/hostname"})"},
      tokens.path());
  EXPECT_NE(r.output.find("is outside"), std::string::npos) << r.output;
}

TEST_F(SdkTest, QueryDatabaseRunsSelectsAndRefusesWrites) {
  start(test_config());
  sb::test::TempDir dir;
  sb::test::TempDir tokens;
  std::string file = (dir.path() / "shop.db").string();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
    sql(db,
        "CREATE TABLE fruit(name TEXT, price REAL); "
        "INSERT INTO fruit VALUES ('apple', 0.5), ('cherry', 4.25)");
    sqlite3_close(db);
  }
  auto query = [&](const std::string& q) {
    json::object input{{"query", q}};
    return run_program({EXAMPLE_QUERY_DATABASE, "--url", url(), "--db", file, "--prompt",
                        "/call client_example-sqlite_query_database " + json::serialize(input)},
                       tokens.path());
  };
  ProgramRun r = query("SELECT name, price FROM fruit ORDER BY name");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(R"({"name":"apple","price":)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(R"({"name":"cherry","price":)"), std::string::npos) << r.output;

  for (const char* write :
       {"DELETE FROM fruit", "select 1; DELETE FROM fruit",
        "WITH x AS (SELECT 1) DELETE FROM fruit", "PRAGMA journal_mode=DELETE"}) {
    r = query(write);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(r.output.find("Only SELECT") != std::string::npos ||
                r.output.find("Only one statement") != std::string::npos)
        << write << ": " << r.output;
  }
  EXPECT_EQ(count_rows(file), 2);
}

}  // namespace
}  // namespace switchboard::test
