// The config loader: the bytes of one config file, read as `serve` reads it: the server's own
// keys (config::apply), then the sections later components own (providers, permission rules).
// (Agents are left out: their parser sits in the agent library, which would make the fuzz build
// compile the whole agent loop.) A bad file must give an error naming the file, never a crash or a
// hang.
#include "config/config.hpp"
#include "permission/ruleset.hpp"
#include "provider/provider.hpp"
#include "split.hpp"
#include "util/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto doc = sb::parse_json(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!doc) return 0;
  const std::string source = "fuzz.json";
  sb::config::Config config;
  if (auto applied = sb::config::apply(config, *doc, source); !applied) {
    if (applied.error().message.find(source) == std::string::npos)
      sb::fuzz::fail("a config error that does not name the file");
    return 0;
  }
  // No environment: an apiKeyEnv names a variable that is then simply unset.
  auto no_env = [](const std::string&) { return std::string(); };
  // Their errors start with the key path; `located` must name the file (the only one here).
  auto check = [&](const sb::Error& e) {
    if (config.located(e).message.find(source) == std::string::npos)
      sb::fuzz::fail("a component's config error that does not name the file");
  };
  if (auto p = sb::provider::load_providers(config.raw, no_env); !p) check(p.error());
  if (auto it = config.raw.find("permission"); it != config.raw.end()) {
    if (auto r = sb::permission::parse_config(it->value()); !r) check(r.error());
    if (auto t = sb::permission::parse_timeout(it->value()); !t) check(t.error());
  }
  return 0;
}
