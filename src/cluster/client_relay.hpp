#pragma once
// Clients of a cluster (issue 20, docs/cluster.md "Clients on any node"): a client connected to
// one node (its home) serves the turns of every node. Each node's ClientToolRegistry keeps every
// client of the cluster, told by this relay:
//
// - What a node's own clients do — register or unregister tools, connect, disconnect — its
//   registry tells the relay (clienttool::RegistryMirror), which publishes it on
//   `<prefix>clients`; every other node's relay does the same in its registry, marked as another
//   node's (Origin::OtherNode: no events of its own, nothing told again). A connection elsewhere
//   is a RemoteSink in the registry: what the registry delivers to it (a request, a cancel) is
//   published on `<prefix>deliver:<home>`, and the home node writes it to its connection.
// - A client's answers (result, progress) reach its home node; the registry there does not know
//   the call, and the node that sent it takes it (server/cluster_asks.cpp, "client.result").
// - A client that moves to another node: the new home's connect reaches every registry, which
//   replays what waits for it there (its Last-Event-ID says what it has) and closes the old
//   connection on the old home.
// - A home node that went away (its lease ended): its clients are disconnected on every node,
//   which starts their reconnect grace; they keep their tools and calls if they connect to
//   another node in time.
// - A node that joins (or whose Redis came back) says hello; every node answers with its own
//   clients, then with `announced` to it, so that the newcomer's registry has them all. Until
//   the nodes it saw at its first join have all answered (or kReadyWait passed), the newcomer is
//   not ready: GET /health answers 503, so that a load balancer sends it nothing yet.
//
// Order: a node's messages (events, these, asks) go out on one connection in the order they were
// made; two nodes' messages have no order between them, so a client's disconnect from its old
// home that arrives after its connect to the new one is recognised (the home is not the sender)
// and ignored.
//
// Not thread-safe: the server's executor only, as the registry and the node.
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "clienttool/registry.hpp"
#include "cluster/node.hpp"

namespace sb::cluster {

class ClientRelay : public clienttool::RegistryMirror,
                    public std::enable_shared_from_this<ClientRelay> {
 public:
  // Listens on the node (before it starts) and mirrors the registry's clients.
  static std::shared_ptr<ClientRelay> create(
      std::shared_ptr<Node> node, std::shared_ptr<clienttool::ClientToolRegistry> registry);

  void registered(const std::string& client_id,
                  const std::vector<clienttool::ClientToolRegistry::Definition>& tools) override;
  void unregistered(const std::string& client_id,
                    const std::vector<std::string>& tool_ids) override;
  void attached(const std::string& client_id, std::shared_ptr<clienttool::ClientSink> sink,
                std::uint64_t last_seq, const std::string& transport) override;
  void detached(const std::string& client_id) override;
  void forgotten(const std::string& client_id) override;

  // The registry's message for `client_id`, whose home is `node`: published to that node.
  void forward(const std::string& node, const std::string& client_id,
               const clienttool::ClientMessage& message);

  // How long a node that joined waits at most for the others' clients.
  static constexpr std::chrono::seconds kReadyWait{5};
  // Whether this node has joined once and heard the clients of every node it saw then (or
  // kReadyWait passed since). Joins after the first (Redis was away) do not count: its registry
  // has the clients already, and every node rejoins at once after a Redis outage.
  bool ready() const;
  // While not ready after the first join: the nodes whose clients it still waits for.
  std::vector<std::string> awaited() const { return {awaited_.begin(), awaited_.end()}; }

 private:
  ClientRelay(std::shared_ptr<Node> node, std::shared_ptr<clienttool::ClientToolRegistry> registry);
  void on_clients(std::string_view from, std::string_view payload);
  void on_deliver(std::string_view payload);
  // The node went away (`lease_ended`), or came back (its hello): its clients are disconnected
  // here (their grace starts), until it or another node announces them again. For a node whose
  // lease ended, the live node with the smallest id speaks for its clients from then on (their
  // disconnect, the end of their grace), so that each is told once.
  void on_gone(const std::string& node, bool lease_ended);
  // Every client connected to this node, with its tools: to all.
  void announce_all();
  // The client's tools (but a chat's own) and its connection here: to all.
  void announce(const std::string& client_id, std::uint64_t last_seq, const std::string& transport);
  void publish(const boost::json::object& message);

  std::shared_ptr<Node> node_;
  std::shared_ptr<clienttool::ClientToolRegistry> registry_;
  bool joined_once_ = false;
  std::set<std::string> awaited_;  // nodes whose `announced` has not come yet
  std::chrono::steady_clock::time_point ready_by_;
  // Where each client known to be connected is: its home node (this one's id for its own).
  std::map<std::string, std::string> home_;
  // This node's own connections, for what other nodes deliver to them.
  std::map<std::string, std::weak_ptr<clienttool::ClientSink>> local_;
  // The registry's connection ids of clients connected elsewhere (to disconnect them).
  std::map<std::string, std::uint64_t> remote_connection_;
};

}  // namespace sb::cluster
