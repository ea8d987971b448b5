// Links against the installed SDK and uses it: with no server on the port, every call must end
// in a ConnectionError, and a tool registered before connecting stays local.
#include <switchboard/client.hpp>

#include <iostream>

int main() {
  switchboard::ClientOptions options;
  options.client_id = "consumer";
  switchboard::Client client("http://127.0.0.1:9", options);  // the discard port: nobody answers
  client.client_tools().register_tool(
      "hello", {"Says hello"},
      [](const boost::json::object&, switchboard::ToolContext&) -> switchboard::ToolOutput {
        return "hello";
      });
  try {
    client.start_session();
    std::cerr << "start_session() succeeded without a server\n";
    return 1;
  } catch (const switchboard::ConnectionError& e) {
    std::cout << "expected: " << e.what() << "\n";
  }
  return client.client_tools().state() == switchboard::ConnectionState::closed ? 0 : 1;
}
