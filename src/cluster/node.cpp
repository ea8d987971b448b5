#include "cluster/node.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <unistd.h>

#include "util/json.hpp"
#include "util/log.hpp"

namespace sb::cluster {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {
// An event from another node is our own nodes' frame: nested as deep as any event.
constexpr std::size_t kEventDepth = 64;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A reply that is not what a command of ours should get: an error reply, or a broken connection.
std::optional<std::string> failed(const Result<RedisReply>& r) {
  if (!r) return r.error().message;
  if (r->type == RedisReply::Type::Error) return "redis: " + r->str;
  return std::nullopt;
}
}  // namespace

Result<std::shared_ptr<Node>> Node::create(asio::any_io_executor executor, NodeOptions options,
                                           std::shared_ptr<bus::EventBus> bus) {
  RedisOptions redis;
  redis.url = options.redis_url;
  redis.client_name = "switchboard-" + options.node_id;
  // A command waits at most a third of the lease: a round of the lease loop then ends (failed)
  // before the lease does, and the next round may still renew it in time.
  redis.command_timeout = std::max(std::chrono::milliseconds(300), options.lease / 3);
  auto lease = RedisClient::create(executor, redis);
  if (!lease) return lease.error();
  auto relay = RedisClient::create(executor, redis);
  if (!relay) return relay.error();
  auto asks = RedisClient::create(executor, redis);
  if (!asks) return asks.error();
  auto node =
      std::shared_ptr<Node>(new Node(executor, std::move(options), std::move(bus),
                                     std::move(*lease), std::move(*relay), std::move(*asks)));
  auto subscriber = RedisSubscriber::create(
      executor, redis,
      [weak = std::weak_ptr<Node>(node)](std::string_view channel, std::string_view payload) {
        if (auto self = weak.lock()) self->on_message(channel, payload);
      },
      [weak = std::weak_ptr<Node>(node)](bool connected) {
        if (auto self = weak.lock()) self->on_subscriber_state(connected);
      });
  if (!subscriber) return subscriber.error();
  node->subscriber_ = std::move(*subscriber);
  return node;
}

Node::Node(asio::any_io_executor executor, NodeOptions options, std::shared_ptr<bus::EventBus> bus,
           std::shared_ptr<RedisClient> lease, std::shared_ptr<RedisClient> relay,
           std::shared_ptr<RedisClient> asks)
    : executor_(executor),
      options_(std::move(options)),
      bus_(std::move(bus)),
      lease_redis_(std::move(lease)),
      relay_redis_(std::move(relay)),
      ask_redis_(std::move(asks)),
      timer_(executor) {
  json::object value{{"id", options_.node_id}, {"started", now_ms()}, {"pid", ::getpid()}};
  member_value_ = json::serialize(value);
}

void Node::start(std::function<void(bool)> each_round) {
  each_round_ = std::move(each_round);
  subscriber_->subscribe(key("events"));
  subscriber_->subscribe(key("ask"));
  subscriber_->subscribe(key("answer:" + options_.node_id));
  for (const auto& [channel, listener] : listeners_)
    subscriber_->subscribe(channel);
  subscriber_->start();
  subscription_ = bus_->subscribe([weak = weak_from_this()](const bus::EventPtr& event) {
    if (auto self = weak.lock()) self->relay(event);
  });
  spawn_lease();
}

void Node::spawn_lease() {
  // A loop that ended by an exception would leave the node looking gone while it serves: it is
  // logged and started again.
  asio::co_spawn(executor_, run_lease(), [weak = weak_from_this()](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      log::error("cluster: the lease loop failed: ", ex.what(), "; started again");
    } catch (...) {
      log::error("cluster: the lease loop failed; started again");
    }
    auto self = weak.lock();
    if (!self || self->stopping_) return;
    // After a pause: a loop that fails at once would otherwise spin.
    auto pause = std::make_shared<asio::steady_timer>(self->executor_, self->options_.lease / 3);
    pause->async_wait([weak, pause](boost::system::error_code) {
      if (auto again = weak.lock(); again && !again->stopping_) again->spawn_lease();
    });
  });
}

asio::awaitable<void> Node::stop() {
  auto self = shared_from_this();
  stopping_ = true;
  timer_.cancel();
  subscription_.reset();
  subscriber_->close();
  for (auto& [id, pending] : asks_)
    pending->done.cancel();
  // Gone at once for the others (they take its turns over without waiting for the lease).
  std::vector<std::string> del{"DEL", key("node:" + options_.node_id)};
  auto gone = co_await lease_redis_->command(std::move(del));
  if (auto why = failed(gone)) log::warn("cluster: could not give the lease up: ", *why);
  std::vector<std::string> srem{"SREM", key("nodes"), options_.node_id};
  (void)co_await lease_redis_->command(std::move(srem));
  lease_redis_->close();
  relay_redis_->close();
  ask_redis_->close();
}

asio::awaitable<void> Node::run_lease() {
  auto self = shared_from_this();
  while (!stopping_) {
    co_await renew_and_look();
    if (stopping_) break;
    if (each_round_) each_round_(std::chrono::steady_clock::now() < take_over_until_);
    timer_.expires_after(options_.lease / 3);
    co_await timer_.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

asio::awaitable<bool> Node::renew_and_look() {
  auto fail = [&](const std::string& why) {
    if (lease_ok_ || error_ != why) log::warn("cluster: ", why);
    lease_ok_ = false;
    was_down_ = true;
    announced_ = false;
    error_ = why;
    return false;
  };
  std::vector<std::string> set{"SET", key("node:" + options_.node_id), member_value_, "PX",
                               std::to_string(options_.lease.count())};
  auto renewed = co_await lease_redis_->command(std::move(set));
  if (auto why = failed(renewed)) co_return fail(*why);
  std::vector<std::string> sadd{"SADD", key("nodes"), options_.node_id};
  auto added = co_await lease_redis_->command(std::move(sadd));
  if (auto why = failed(added)) co_return fail(*why);
  // Not a member any more although every round went well: the others took this node for gone
  // (its loop stood still longer than the lease) and let its clients and turns go.
  if (joined_ && !was_down_ && added->integer == 1) {
    log::warn("cluster: the other nodes took node ", options_.node_id,
              " for gone (its lease ran out); it joins again");
    was_down_ = true;
    announced_ = false;
  }
  std::vector<std::string> smembers{"SMEMBERS", key("nodes")};
  auto members = co_await lease_redis_->command(std::move(smembers));
  if (auto why = failed(members)) co_return fail(*why);
  std::vector<std::string> ids;
  std::vector<std::string> keys{"MGET"};
  for (const auto& m : members->elements) {
    ids.push_back(m.str);
    keys.push_back(key("node:" + m.str));
  }
  auto leases = co_await lease_redis_->command(std::move(keys));
  if (auto why = failed(leases)) co_return fail(*why);
  if (leases->elements.size() != ids.size()) co_return fail("redis: MGET answered a wrong count");
  std::set<std::string> live;
  std::set<std::string> gone;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (leases->elements[i].type == RedisReply::Type::Nil)
      gone.insert(ids[i]);
    else
      live.insert(ids[i]);
  }
  // Those another node removed from the set first are gone for this one too.
  for (const auto& id : nodes_)
    if (!live.count(id)) gone.insert(id);
  for (const auto& id : gone) {
    if (id == options_.node_id) continue;
    std::vector<std::string> srem{"SREM", key("nodes"), id};
    if (auto removed = co_await lease_redis_->command(std::move(srem)); failed(removed))
      co_return fail(*failed(removed));
  }
  nodes_ = std::move(live);
  bool came_back = was_down_;
  if (came_back)
    log::info("cluster: node ", options_.node_id, " is in the cluster (", nodes_.size(),
              " node(s))");
  lease_ok_ = true;
  joined_ = true;
  was_down_ = false;
  error_.reset();
  bool someone_left = came_back;
  for (const auto& id : gone) {
    if (id == options_.node_id) continue;
    log::info("cluster: node ", id, " went away; its turns are taken over");
    someone_left = true;
    if (on_gone_) on_gone_(id);
  }
  if (someone_left) take_over_until_ = std::chrono::steady_clock::now() + kTakeOverWindow;
  maybe_joined();
  co_return true;
}

void Node::relay(const bus::EventPtr& event) {
  if (!event->origin.empty()) return;  // another node's, relayed here
  send("events", event->frame);
}

void Node::send(std::string_view channel, std::string_view payload) {
  if (stopping_) return;
  if (in_flight_ >= kMaxInFlight) {
    ++dropped_;
    return;
  }
  ++in_flight_;
  std::string message;
  message.reserve(options_.node_id.size() + 1 + payload.size());
  message.append(options_.node_id).append(1, '\n').append(payload);
  // Commands go out in the order they are issued, and this runs in the order of the calls. (The
  // command is a named vector: GCC 12 cannot compile a braced list inside co_await.)
  asio::co_spawn(
      executor_,
      [self = shared_from_this(), channel = key(channel),
       payload = std::move(message)]() mutable -> asio::awaitable<void> {
        std::vector<std::string> publish{"PUBLISH", std::move(channel), std::move(payload)};
        auto sent = co_await self->relay_redis_->command(std::move(publish));
        --self->in_flight_;
        if (failed(sent)) ++self->dropped_;
      },
      asio::detached);
}

void Node::listen(std::string channel, Listener listener) {
  listeners_[key(channel)] = std::move(listener);
}

void Node::on_message(std::string_view channel, std::string_view payload) {
  if (channel == key("ask")) return on_ask_message(payload);
  if (channel == key("answer:" + options_.node_id)) return on_answer(payload);
  if (auto it = listeners_.find(std::string(channel)); it != listeners_.end()) {
    auto newline = payload.find('\n');
    if (newline == std::string_view::npos) return;
    auto from = payload.substr(0, newline);
    if (from == options_.node_id) return;
    // A copy: the listener may add listeners.
    Listener listener = it->second;
    return listener(from, payload.substr(newline + 1));
  }
  if (channel != key("events")) return;
  auto newline = payload.find('\n');
  if (newline == std::string_view::npos) return;
  std::string origin(payload.substr(0, newline));
  if (origin == options_.node_id) return;
  auto doc = parse_json(payload.substr(newline + 1), kEventDepth);
  const json::object* frame = doc && doc->is_object() ? &doc->get_object() : nullptr;
  const json::value* type = frame ? frame->if_contains("type") : nullptr;
  const json::value* properties = frame ? frame->if_contains("properties") : nullptr;
  if (!type || !type->is_string() || !properties || !properties->is_object()) {
    log::warn("cluster: an event from node ", origin, " does not read as one; dropped");
    return;
  }
  bus_->publish_from(std::move(origin), type->get_string(), properties->get_object());
}

asio::awaitable<Result<Answers>> Node::ask(std::string op, json::object args, bool first) {
  auto self = shared_from_this();
  if (stopping_) co_return Answers{};
  // Before its first round this node does not know who else is there: "nobody has it" would be
  // a guess.
  if (!joined_)
    co_return make_error(ErrorCode::Unavailable,
                         "cluster: this node has not joined the cluster yet (" +
                             error_.value_or("redis: not answered yet") + ")");
  std::set<std::string> others = nodes_;
  others.erase(options_.node_id);
  if (others.empty()) co_return Answers{};
  if (asks_.size() >= kMaxAsks)
    co_return make_error(ErrorCode::Unavailable,
                         "cluster: too many questions to other nodes wait; try again");
  std::string id = options_.node_id + ":" + std::to_string(++next_ask_);
  auto pending = std::make_shared<PendingAsk>(
      PendingAsk{std::move(others), first, {}, asio::steady_timer(executor_)});
  pending->done.expires_after(kAskTimeout);
  asks_.emplace(id, pending);
  json::object message{{"id", id}, {"op", std::move(op)}, {"args", std::move(args)}};
  std::vector<std::string> publish{"PUBLISH", key("ask"),
                                   options_.node_id + "\n" + json::serialize(message)};
  auto sent = co_await ask_redis_->command(std::move(publish));
  if (auto why = failed(sent)) {
    asks_.erase(id);
    co_return make_error(ErrorCode::Unavailable,
                         "cluster: the other nodes cannot be reached (" + *why + ")");
  }
  auto done = [&] {
    return pending->waiting.empty() || (pending->first && !pending->answers.replies.empty());
  };
  if (!done() && !stopping_) co_await pending->done.async_wait(asio::as_tuple(asio::use_awaitable));
  asks_.erase(id);
  // A node that had it would have been the first to say so.
  if (!(pending->first && !pending->answers.replies.empty()))
    pending->answers.silent.assign(pending->waiting.begin(), pending->waiting.end());
  co_return std::move(pending->answers);
}

void Node::on_ask_message(std::string_view payload) {
  auto newline = payload.find('\n');
  if (newline == std::string_view::npos) return;
  std::string from(payload.substr(0, newline));
  if (from == options_.node_id || stopping_) return;
  auto doc = parse_json(payload.substr(newline + 1), kEventDepth);
  const json::object* message = doc && doc->is_object() ? &doc->get_object() : nullptr;
  const json::value* id = message ? message->if_contains("id") : nullptr;
  const json::value* op = message ? message->if_contains("op") : nullptr;
  const json::value* args = message ? message->if_contains("args") : nullptr;
  if (!id || !id->is_string() || !op || !op->is_string() || !args || !args->is_object()) {
    log::warn("cluster: an ask from node ", from, " does not read as one; dropped");
    return;
  }
  asio::co_spawn(
      executor_,
      [self = shared_from_this(), channel = key("answer:" + from),
       id = std::string(id->get_string()), op = std::string(op->get_string()),
       args = args->get_object()]() mutable -> asio::awaitable<void> {
        json::value reply = nullptr;
        if (self->ask_handler_) reply = co_await self->ask_handler_(std::move(op), std::move(args));
        json::object answer{
            {"id", id}, {"node", self->options_.node_id}, {"reply", std::move(reply)}};
        std::vector<std::string> publish{"PUBLISH", std::move(channel), json::serialize(answer)};
        auto sent = co_await self->ask_redis_->command(std::move(publish));
        if (auto why = failed(sent))
          log::warn("cluster: an answer to another node was lost: ", *why);
      },
      asio::detached);
}

void Node::on_answer(std::string_view payload) {
  auto doc = parse_json(payload, kEventDepth);
  const json::object* answer = doc && doc->is_object() ? &doc->get_object() : nullptr;
  const json::value* id = answer ? answer->if_contains("id") : nullptr;
  const json::value* node = answer ? answer->if_contains("node") : nullptr;
  const json::value* reply = answer ? answer->if_contains("reply") : nullptr;
  if (!id || !id->is_string() || !node || !node->is_string() || !reply) return;
  auto it = asks_.find(std::string(id->get_string()));
  if (it == asks_.end()) return;  // answered after its time
  auto& pending = *it->second;
  // Only the nodes it was asked of count, each once (a node that joined since, or an answer
  // sent twice, would otherwise stand in for one that was asked).
  if (!pending.waiting.erase(std::string(node->get_string()))) return;
  if (!reply->is_null()) pending.answers.replies.push_back(*reply);
  if (pending.waiting.empty() || (pending.first && !pending.answers.replies.empty()))
    pending.done.cancel();
}

void Node::maybe_joined() {
  // Both: the others see this node alive (they may have forgotten it while it was away), and it
  // hears what they answer.
  if (!lease_ok_ || !subscribed_ || announced_ || stopping_) return;
  announced_ = true;
  if (on_joined_) on_joined_();
}

void Node::on_subscriber_state(bool connected) {
  subscribed_ = connected;
  if (connected) maybe_joined();
  announced_ = announced_ && connected;
  if (!connected && !stopping_)
    log::warn(
        "cluster: the event channel is down: other nodes' events are not seen until it is "
        "back");
}

NodeStatus Node::status() const {
  NodeStatus s;
  s.node_id = options_.node_id;
  s.ok = lease_ok_;
  s.error = error_;
  if (!lease_ok_ && !error_) s.error = "redis: not answered yet";
  s.nodes.assign(nodes_.begin(), nodes_.end());
  return s;
}

}  // namespace sb::cluster
