// get_local_time: the model asks this program for the local time (seed 000, "Basic Client Tool").
//
//   get_local_time [--url http://127.0.0.1:4096] [--prompt "What time is it locally?"]
//
// With the server's default scripted model, make the call yourself:
//   get_local_time --prompt '/call client_example-time_get_local_time {"timezone": "Asia/Tokyo"}'
#include <time.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "example_session.hpp"

namespace {

// The time in `tz` (an IANA name such as "Europe/Berlin"), formatted like
// "2025-01-31 14:05:09 CET". POSIX offers time zones only through the process-wide TZ variable,
// so the switch is serialized; nothing else in this program reads it.
std::string time_in(const std::string& tz) {
  namespace fs = std::filesystem;
  if (tz != "UTC" && (tz.find("..") != std::string::npos || tz.empty() || tz.front() == '/' ||
                      !fs::is_regular_file(fs::path("/usr/share/zoneinfo") / tz)))
    throw std::runtime_error("Unknown timezone: " + tz);
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  const char* saved = std::getenv("TZ");
  std::string previous = saved ? saved : "";
  setenv("TZ", tz.c_str(), 1);
  tzset();
  time_t now = time(nullptr);
  struct tm local {};
  localtime_r(&now, &local);
  char text[64];
  strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S %Z", &local);
  if (saved)
    setenv("TZ", previous.c_str(), 1);
  else
    unsetenv("TZ");
  tzset();
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  auto options = example::parse(argc, argv, {}, "What time is it locally?", "");
  auto client = example::client_with_tool(
      options, "example-time", "get_local_time",
      {"Get the current local time on the client machine",
       example::string_input("timezone", "Timezone (e.g., 'America/New_York')", false)},
      [](const boost::json::object& input, switchboard::ToolContext&) -> switchboard::ToolOutput {
        std::string tz = "UTC";
        if (auto* v = input.if_contains("timezone"); v && v->is_string()) tz = v->get_string();
        std::cerr << "get_local_time(" << tz << ")\n";
        return switchboard::ToolResult{"Local time (" + tz + ")", time_in(tz), {}};
      });
  return example::run_turn(*client, options.prompt);
}
