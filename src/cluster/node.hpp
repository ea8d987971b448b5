#pragma once
// A node of a cluster (issue 20, docs/cluster.md): several servers on one PostgreSQL store and
// one Redis. What this part does, on Redis:
//
// - Membership. The node keeps a key `<prefix>node:<id>` alive with a lease (SET PX, renewed
//   every lease/3) and its id in the set `<prefix>nodes`. Every lease/3 it reads which members'
//   keys are gone: such a node stopped (or lost Redis for a whole lease). Whoever sees it first
//   removes it from the set; every node then has `each_round(true)` take over the turns that
//   node left (session::SessionService::take_over(); which node gets which turn is decided by
//   the store's claims, not here). The gone node's connection to the store may hold its claims
//   a while longer (a machine that vanished is noticed by TCP keepalives), so the call is
//   repeated every round for kTakeOverWindow. Also after Redis came back: who left meanwhile
//   cannot be known.
// - Events. Every event of this node's bus goes to the channel `<prefix>events` (PUBLISH, as
//   `<node id>\n<frame>`), and every other node's event from there goes into this node's bus
//   (bus::EventBus::publish_from), so an /event stream on any node sees every node's events.
//   Redis's pub/sub keeps each node's order; an event published while Redis is away is lost for
//   the other nodes (at most kMaxInFlight waiting are kept; the rest are counted and dropped).
// - Asks. What one node cannot answer alone — a reply to a permission ask or a question that
//   waits on another node, an abort of a turn running there, the lists of what waits on every
//   node — it asks the others: PUBLISH `<prefix>ask` "<node id>\n{id, op, args}". Every other
//   node answers on `<prefix>answer:<asker>` with {id, node, reply} (reply null: not here), and
//   the asker collects the answers of the nodes it knew to be alive when it asked, until all
//   have answered, the first has something (for what one node alone has), or kAskTimeout has
//   passed; who did not answer is said. At most kMaxAsks wait at once.
//
// The lease and the asks each have a connection of their own: a burst of events waiting to be
// published cannot hold a renewal up past the lease (the node would look gone), nor an ask past
// its time.
//
// Not thread-safe: the server's executor only, as the bus. Every Redis command has the client's
// timeout; stop() ends the loops and gives the node's key up.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bus/event_bus.hpp"
#include "cluster/redis.hpp"

namespace sb::cluster {

struct NodeOptions {
  std::string redis_url;
  std::string node_id;
  std::string key_prefix = "switchboard:";
  std::chrono::milliseconds lease{3000};
};

// What a node answers to another's ask (Node::ask): null when it has nothing to do with it.
// A coroutine: an answer may need the store.
using AskHandler = std::function<boost::asio::awaitable<boost::json::value>(
    std::string op, boost::json::object args)>;

// What the other nodes answered to an ask.
struct Answers {
  std::vector<boost::json::value> replies;  // the non-null ones, in the order they came
  std::vector<std::string> silent;          // nodes that did not answer in time, sorted
};

// GET /health's view of the cluster.
struct NodeStatus {
  std::string node_id;
  bool ok = false;                   // Redis answers, and this node's lease is current
  std::optional<std::string> error;  // why not
  std::vector<std::string> nodes;    // the live nodes as last read (this one included), sorted
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  static constexpr std::size_t kMaxInFlight = 10000;
  static constexpr std::chrono::seconds kTakeOverWindow{30};
  static constexpr std::chrono::milliseconds kAskTimeout{2000};
  static constexpr std::size_t kMaxAsks = 1000;

  // Checks the options (InvalidRequest: a Redis URL that is not one); connects once started.
  static Result<std::shared_ptr<Node>> create(boost::asio::any_io_executor executor,
                                              NodeOptions options,
                                              std::shared_ptr<bus::EventBus> bus);
  // Starts the lease, the membership reads and the relay of events. `each_round` is called on
  // the executor after every round of the lease (every lease/3, whether Redis answered or not),
  // with true while turns of a node that went away are to be taken over (above).
  void start(std::function<void(bool take_over)> each_round);
  // Ends the loops, gives the lease up (a short wait for Redis at most), closes the connections.
  boost::asio::awaitable<void> stop();

  // How this node answers the others' asks; set before start().
  void on_ask(AskHandler handler) { ask_handler_ = std::move(handler); }
  // Asks every other live node (above); `first`: done at the first non-null reply (what one node
  // alone can have). No replies and no silent nodes: no other node is alive, or none has
  // anything to do with it. Unavailable when this node has not joined yet (its first lease round
  // has not passed), Redis does not take the ask, or too many asks wait.
  boost::asio::awaitable<Result<Answers>> ask(std::string op, boost::json::object args,
                                              bool first = false);

  // Messages that other nodes send() on `<prefix><channel>`, with the sender's id (this node's
  // own are not heard). Set before start().
  using Listener = std::function<void(std::string_view from, std::string_view payload)>;
  void listen(std::string channel, Listener listener);
  // PUBLISHes `payload` on `<prefix><channel>` after every event and message that this node sent
  // before it (one connection, in order). Lost for the others, and counted, as an event is when
  // Redis is away or too many wait.
  void send(std::string_view channel, std::string_view payload);
  // Once this node's lease is renewed and its channels are subscribed, again after either failed
  // (this node was away: the others may have forgotten what it told them, or it missed what they
  // said).
  void on_joined(std::function<void()> handler) { on_joined_ = std::move(handler); }
  // With each other node that went away (its lease ended), before that round's each_round.
  void on_gone(std::function<void(const std::string& node)> handler) {
    on_gone_ = std::move(handler);
  }

  // Node `id` said it has joined (its hello reached this node): counted among the live nodes
  // now, before this node's next lease round reads it from Redis. Else, for up to a round, this
  // node's asks would not wait for its reply: a client's answer that the new node's call waits
  // for would be refused as unknown while the new node takes it.
  void met(const std::string& id) {
    if (id != options_.node_id) nodes_.insert(id);
  }

  NodeStatus status() const;
  const std::string& id() const { return options_.node_id; }
  // Events that could not be sent to the other nodes (Redis away, too many waiting).
  std::uint64_t events_dropped() const { return dropped_; }

 private:
  Node(boost::asio::any_io_executor executor, NodeOptions options,
       std::shared_ptr<bus::EventBus> bus, std::shared_ptr<RedisClient> lease,
       std::shared_ptr<RedisClient> relay, std::shared_ptr<RedisClient> asks);
  void spawn_lease();
  std::string key(std::string_view name) const { return options_.key_prefix + std::string(name); }
  boost::asio::awaitable<void> run_lease();
  // One round: renews the lease, reads the members, removes the gone ones. False on a failure.
  boost::asio::awaitable<bool> renew_and_look();
  void relay(const bus::EventPtr& event);
  void on_message(std::string_view channel, std::string_view payload);
  void on_ask_message(std::string_view payload);
  void on_answer(std::string_view payload);
  void on_subscriber_state(bool connected);
  // Calls on_joined_ when this node is back in the cluster (above) and has not yet.
  void maybe_joined();

  boost::asio::any_io_executor executor_;
  NodeOptions options_;
  std::shared_ptr<bus::EventBus> bus_;
  std::shared_ptr<RedisClient> lease_redis_;
  std::shared_ptr<RedisClient> relay_redis_;
  std::shared_ptr<RedisClient> ask_redis_;
  std::shared_ptr<RedisSubscriber> subscriber_;
  bus::Subscription subscription_;
  boost::asio::steady_timer timer_;
  std::function<void(bool)> each_round_;
  std::chrono::steady_clock::time_point take_over_until_{};
  std::string member_value_;  // what the node's key holds: its id and start time
  bool stopping_ = false;
  bool lease_ok_ = false;
  bool was_down_ = false;    // Redis failed since the last good round
  bool joined_ = false;      // a lease round passed once: nodes_ is known
  bool subscribed_ = false;  // the subscriber's channels are subscribed
  bool announced_ = false;   // on_joined_ was called since this node was last away
  std::optional<std::string> error_;
  std::set<std::string> nodes_;
  std::size_t in_flight_ = 0;
  std::uint64_t dropped_ = 0;
  AskHandler ask_handler_;
  std::map<std::string, Listener> listeners_;  // by channel (with the prefix)
  std::function<void()> on_joined_;
  std::function<void(const std::string&)> on_gone_;
  // Asks of this node that wait for answers, by id.
  struct PendingAsk {
    std::set<std::string> waiting;  // the other live nodes when it was asked, until they answer
    bool first = false;             // done at the first non-null reply
    Answers answers;
    boost::asio::steady_timer done;  // cancelled when it is done before its time
  };
  std::map<std::string, std::shared_ptr<PendingAsk>> asks_;
  std::uint64_t next_ask_ = 0;
};

}  // namespace sb::cluster
