// The README's first example, run as a newcomer would paste it into a shell: the block under
// "## Try it", against a server with the default settings (client tokens on). Only the port and
// the request id (which a person copies from the stream) are filled in.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "blackbox_util.hpp"

#ifndef SWITCHBOARD_SOURCE_DIR
#error "SWITCHBOARD_SOURCE_DIR must name the source tree (for README.md)"
#endif

namespace sb::test {
namespace {

// The lines of the first ```sh block after `heading` in README.md.
std::vector<std::string> readme_block(std::string_view heading) {
  std::ifstream in(std::filesystem::path(SWITCHBOARD_SOURCE_DIR) / "README.md");
  std::vector<std::string> lines;
  std::string line;
  bool under_heading = false, in_block = false;
  while (std::getline(in, line)) {
    if (in_block) {
      if (line == "```") break;
      lines.push_back(line);
    } else if (line == heading) {
      under_heading = true;
    } else if (under_heading && line == "```sh") {
      in_block = true;
    }
  }
  return lines;
}

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(Readme, TheTryItBlockWorksAsWrittenWithTheDefaultSettings) {
  auto lines = readme_block("## Try it");
  ASSERT_FALSE(lines.empty()) << "README.md has no ```sh block under \"## Try it\"";
  ServerProcess server(ServerProcess::Options{});  // defaults: client tokens on
  TempDir dir("switchboard-readme");
  auto out = dir.path() / "out";

  std::string script = "set -u\n";
  bool answered = false;
  for (std::string line : lines) {
    if (line.starts_with("./scripts/run.sh")) continue;  // the server is this test's
    replace_all(line, "localhost:4096", "127.0.0.1:" + std::to_string(server.port()));
    if (line.find("client-tools/result") != std::string::npos) {
      // What a person does at this point: read the requestID off the stream's output.
      script +=
          "REQUEST_ID=$(for i in $(seq 200); do grep -o -m1 'req_[A-Za-z0-9]*' \"$OUT\" "
          "&& break; sleep 0.05; done)\n";
      answered = true;
    }
    replace_all(line, "req_…", "'\"$REQUEST_ID\"'");
    script += line + "\n";
  }
  ASSERT_TRUE(answered) << "the block no longer posts a result:\n" << script;

  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setsid();  // one process group with the commands it sends to the background
    ::setenv("OUT", out.c_str(), 1);
    FILE* f = std::freopen(out.c_str(), "w", stdout);
    if (!f || ::dup2(STDOUT_FILENO, STDERR_FILENO) < 0) ::_exit(126);
    ::execlp("bash", "bash", "-c", script.c_str(), nullptr);
    ::_exit(127);
  }
  struct KillGroup {  // the pending stream never ends on its own
    pid_t pid;
    ~KillGroup() { ::kill(-pid, SIGKILL); }
  } kill_group{pid};
  int status = -1;
  bool exited = wait_until([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 30s);
  ASSERT_TRUE(exited) << "the block did not finish within 30 s:\n" << read_all(out);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_all(out);
  // The execute call, still in the background, prints the tool's result when it arrives.
  EXPECT_TRUE(wait_until([&] { return contains(read_all(out), R"("output":"hi")"); }, 5s))
      << "the execute call did not get the result:\n"
      << read_all(out) << "\nthe script:\n"
      << script << "\nthe server:\n"
      << server.log();
  std::string text = read_all(out);
  EXPECT_TRUE(contains(text, R"({"success":true})")) << text;
  EXPECT_TRUE(contains(text, R"("tool":"client_c1_echo")")) << "the stream showed no request:\n"
                                                            << text;
  EXPECT_FALSE(contains(text, "UNAUTHORIZED")) << text;
}

}  // namespace
}  // namespace sb::test
