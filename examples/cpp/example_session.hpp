#pragma once
// What the three examples share: command-line options, and one session turn that prints the
// answer. Each example registers its tool on client.client_tools() and calls run_turn().
#include <boost/json.hpp>
#include <switchboard/client.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>

namespace example {

struct Options {
  std::string url = "http://127.0.0.1:4096";
  std::string prompt;
  // Where the client token is kept between runs (the server issues it on the client id's first
  // use and wants it from then on); default $HOME/.config/switchboard/CLIENT_ID.token.
  std::string token_file;
  std::map<std::string, std::string> extra;  // the example's own --name value options
};

// --url URL, --prompt TEXT and the example's own options (`names`); exits with usage otherwise.
inline Options parse(int argc, char** argv, const std::set<std::string>& names,
                     std::string default_prompt, const char* usage) {
  Options o;
  o.prompt = std::move(default_prompt);
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc || flag.size() < 3 || flag.rfind("--", 0) != 0) {
      std::cerr << "usage: " << argv[0] << " [--url URL] [--prompt TEXT] [--token-file FILE] "
                << usage << "\n";
      std::exit(2);
    }
    std::string value = argv[++i];
    if (flag == "--url") {
      o.url = value;
    } else if (flag == "--prompt") {
      o.prompt = value;
    } else if (flag == "--token-file") {
      o.token_file = value;
    } else if (names.count(flag.substr(2))) {
      o.extra[flag.substr(2)] = value;
    } else {
      std::cerr << argv[0] << ": unknown option " << flag << "\n";
      std::exit(2);
    }
  }
  return o;
}

// {"type": "object", "properties": {name: {"type": "string", "description": ...}}}, with
// `name` required when `required` is set: the schema of each example's one input.
inline boost::json::value string_input(const char* name, const char* description, bool required) {
  boost::json::object schema{
      {"type", "object"},
      {"properties", {{name, {{"type", "string"}, {"description", description}}}}}};
  if (required) schema["required"] = boost::json::array{boost::json::value(name)};
  return schema;
}

// A client whose tools belong to `client_id`, with one tool registered (locally: nothing is sent
// before start_session() connects).
inline std::unique_ptr<switchboard::Client> client_with_tool(
    const Options& o, std::string client_id, const std::string& name,
    switchboard::ToolDefinition definition, switchboard::ClientToolsManager::Handler handler) {
  switchboard::ClientOptions options;
  std::filesystem::path token_file = o.token_file;
  if (token_file.empty()) {
    const char* home = std::getenv("HOME");
    token_file = std::filesystem::path(home ? home : ".") / ".config" / "switchboard" /
                 (client_id + ".token");
  }
  // The token from an earlier run; the server issues a new one if it does not know the id yet.
  std::ifstream saved(token_file);
  std::getline(saved, options.client_token);
  options.on_client_token = [token_file](const std::string& token) {
    std::error_code ec;
    std::filesystem::create_directories(token_file.parent_path(), ec);
    std::ofstream(token_file) << token << "\n";
    std::filesystem::permissions(
        token_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write, ec);
  };
  options.client_id = std::move(client_id);
  auto client = std::make_unique<switchboard::Client>(o.url, options);
  client->client_tools().register_tool(name, std::move(definition), std::move(handler));
  return client;
}

// Starts a session with the client's tools, sends the prompt and prints the answer.
inline int run_turn(switchboard::Client& client, const std::string& prompt) {
  try {
    auto [session, send, close] = client.start_session();
    std::cerr << "session " << session.id << "; tools of client "
              << client.client_tools().client_id() << " are connected\n";
    switchboard::MessageWithParts answer = send(prompt);
    close();
    if (answer.info.error) {
      std::cerr << "the turn failed: " << answer.info.error->name << ": "
                << answer.info.error->message << "\n";
      return 1;
    }
    std::cout << answer.text() << "\n";
    return 0;
  } catch (const switchboard::Error& e) {
    std::cerr << "switchboard: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace example
