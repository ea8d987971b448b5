#include "cluster/client_relay.hpp"

#include <limits>

#include "clienttool/wire.hpp"
#include "util/json.hpp"
#include "util/log.hpp"

namespace sb::cluster {

namespace json = boost::json;
using clienttool::ClientMessage;
using clienttool::Origin;

namespace {

constexpr std::string_view kClients = "clients";
// Tools' schemas are nested as deep as a registration allows.
constexpr std::size_t kMessageDepth = 128;

std::string deliver_channel(const std::string& node) {
  return "deliver:" + node;
}

std::optional<std::string> string_field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (!v || !v->is_string()) return std::nullopt;
  return std::string(v->get_string());
}

std::optional<std::uint64_t> unsigned_field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v && v->is_uint64()) return v->get_uint64();
  if (v && v->is_int64() && v->get_int64() >= 0) return static_cast<std::uint64_t>(v->get_int64());
  return std::nullopt;
}

// A connection on another node, as this node's registry sees it.
class RemoteSink : public clienttool::ClientSink {
 public:
  RemoteSink(std::weak_ptr<ClientRelay> relay, std::string node, std::string client_id)
      : relay_(std::move(relay)), node_(std::move(node)), client_id_(std::move(client_id)) {}
  void deliver(std::shared_ptr<const ClientMessage> message) override {
    if (auto relay = relay_.lock()) relay->forward(node_, client_id_, *message);
  }
  // The home node closes its own connection when the newer one's connect reaches it.
  void close(const std::string&) override {}

 private:
  std::weak_ptr<ClientRelay> relay_;
  std::string node_;
  std::string client_id_;
};

}  // namespace

std::shared_ptr<ClientRelay> ClientRelay::create(
    std::shared_ptr<Node> node, std::shared_ptr<clienttool::ClientToolRegistry> registry) {
  auto relay = std::shared_ptr<ClientRelay>(new ClientRelay(node, registry));
  std::weak_ptr<ClientRelay> weak = relay;
  node->listen(std::string(kClients), [weak](std::string_view from, std::string_view payload) {
    if (auto self = weak.lock()) self->on_clients(from, payload);
  });
  node->listen(deliver_channel(node->id()), [weak](std::string_view, std::string_view payload) {
    if (auto self = weak.lock()) self->on_deliver(payload);
  });
  // Joined, or back after Redis was away: the others hear of this node's clients again (they
  // may have let them go), and tell it of theirs.
  node->on_joined([weak] {
    auto self = weak.lock();
    if (!self) return;
    // The hello first: the others forget what they knew of this node's clients, then hear what
    // is true now.
    self->publish(json::object{{"op", "hello"}});
    self->announce_all();
    if (!self->joined_once_) {
      self->joined_once_ = true;
      for (const auto& id : self->node_->status().nodes)
        if (id != self->node_->id()) self->awaited_.insert(id);
      self->ready_by_ = std::chrono::steady_clock::now() + kReadyWait;
    }
  });
  node->on_gone([weak](const std::string& gone) {
    if (auto self = weak.lock()) self->on_gone(gone, true);
  });
  registry->set_mirror(relay);
  return relay;
}

ClientRelay::ClientRelay(std::shared_ptr<Node> node,
                         std::shared_ptr<clienttool::ClientToolRegistry> registry)
    : node_(std::move(node)), registry_(std::move(registry)) {}

void ClientRelay::publish(const json::object& message) {
  node_->send(std::string(kClients), json::serialize(message));
}

void ClientRelay::registered(const std::string& client_id,
                             const std::vector<clienttool::ClientToolRegistry::Definition>& tools) {
  // One registration per session and naming: what a registration of the registry takes.
  std::map<std::pair<std::string, bool>, json::array> groups;
  for (const auto& def : tools) {
    if (def->plain_name) continue;  // a chat's own tools stay on the chat's node
    json::object spec{
        {"id", def->name}, {"description", def->description}, {"parameters", def->parameters}};
    if (def->interactive) spec["interactive"] = true;
    groups[{def->session_id, def->plain_name}].push_back(std::move(spec));
  }
  for (auto& [key, specs] : groups)
    publish(json::object{{"op", "register"},
                         {"client", client_id},
                         {"sessionID", key.first},
                         {"plainNames", key.second},
                         {"tools", std::move(specs)}});
}

void ClientRelay::unregistered(const std::string& client_id,
                               const std::vector<std::string>& tool_ids) {
  publish(json::object{
      {"op", "unregister"}, {"client", client_id}, {"toolIDs", clienttool::to_json(tool_ids)}});
}

void ClientRelay::attached(const std::string& client_id,
                           std::shared_ptr<clienttool::ClientSink> sink, std::uint64_t last_seq,
                           const std::string& transport) {
  home_[client_id] = node_->id();
  local_[client_id] = sink;
  remote_connection_.erase(client_id);
  announce(client_id, last_seq, transport);
}

void ClientRelay::announce(const std::string& client_id, std::uint64_t last_seq,
                           const std::string& transport) {
  // Its tools with it: a node whose grace for the client ended has forgotten them.
  if (auto tools = registry_->get_tools(client_id); !tools.empty()) registered(client_id, tools);
  publish(json::object{
      {"op", "attach"}, {"client", client_id}, {"lastSeq", last_seq}, {"transport", transport}});
}

void ClientRelay::forgotten(const std::string& client_id) {
  publish(json::object{{"op", "forget"}, {"client", client_id}});
}

void ClientRelay::detached(const std::string& client_id) {
  auto it = home_.find(client_id);
  if (it == home_.end() || it->second != node_->id()) return;
  home_.erase(it);
  local_.erase(client_id);
  publish(json::object{{"op", "detach"}, {"client", client_id}});
}

void ClientRelay::forward(const std::string& node, const std::string& client_id,
                          const ClientMessage& message) {
  // The request's wire form goes as it is, inside the message.
  std::string payload = "{\"client\":";
  append_json_string(payload, client_id);
  payload += ",\"requestID\":";
  append_json_string(payload, message.request_id);
  if (message.kind == ClientMessage::Kind::Request) {
    payload += ",\"seq\":" + std::to_string(message.seq) + ",\"request\":" + message.request_json;
  } else {
    payload += ",\"reason\":";
    append_json_string(payload, message.reason);
  }
  payload += "}";
  node_->send(deliver_channel(node), std::move(payload));
}

void ClientRelay::on_deliver(std::string_view payload) {
  auto doc = parse_json(payload, kMessageDepth);
  const json::object* o = doc && doc->is_object() ? &doc->get_object() : nullptr;
  auto client_id = o ? string_field(*o, "client") : std::nullopt;
  auto request_id = o ? string_field(*o, "requestID") : std::nullopt;
  if (!client_id || !request_id) {
    log::warn("cluster: a message for a client does not read as one; dropped");
    return;
  }
  auto message = std::make_shared<ClientMessage>();
  message->request_id = std::move(*request_id);
  if (const json::value* request = o->if_contains("request")) {
    auto seq = unsigned_field(*o, "seq");
    if (!request->is_object() || !seq) {
      log::warn("cluster: a request for client ", *client_id, " does not read as one; dropped");
      return;
    }
    message->kind = ClientMessage::Kind::Request;
    message->seq = *seq;
    message->request_json = json::serialize(*request);
  } else {
    message->kind = ClientMessage::Kind::Cancel;
    message->reason = string_field(*o, "reason").value_or("cancelled");
  }
  auto it = local_.find(*client_id);
  auto sink = it != local_.end() ? it->second.lock() : nullptr;
  // Gone from here meanwhile: its next connection, wherever it is, replays what still waits.
  if (!sink) {
    log::debug("cluster: a message for client ", *client_id, ", which left this node; dropped");
    return;
  }
  sink->deliver(std::move(message));
}

void ClientRelay::on_clients(std::string_view from_view, std::string_view payload) {
  std::string from(from_view);
  auto doc = parse_json(payload, kMessageDepth);
  const json::object* o = doc && doc->is_object() ? &doc->get_object() : nullptr;
  auto op = o ? string_field(*o, "op") : std::nullopt;
  if (!op) {
    log::warn("cluster: a client message from node ", from, " does not read as one; dropped");
    return;
  }
  if (*op == "hello") {
    node_->met(from);
    on_gone(from, false);
    announce_all();
    // After its clients, on the same connection: the newcomer has them all when this comes.
    return publish(json::object{{"op", "announced"}, {"to", from}});
  }
  if (*op == "announced") {
    if (string_field(*o, "to") == node_->id()) awaited_.erase(from);
    return;
  }
  auto client_id = string_field(*o, "client");
  if (!client_id || !clienttool::valid_name(*client_id)) {
    log::warn("cluster: a client message from node ", from, " names no client; dropped");
    return;
  }
  if (*op == "register") {
    auto specs = clienttool::parse_tool_specs(o->if_contains("tools"), "tools");
    const json::value* plain = o->if_contains("plainNames");
    if (!specs) {
      log::warn("cluster: tools of client ", *client_id, " from node ", from,
                " do not read: ", specs.error().message);
      return;
    }
    auto r = registry_->register_tools(
        *client_id, std::move(*specs), string_field(*o, "sessionID").value_or(""),
        plain && plain->is_bool() && plain->get_bool(), Origin::OtherNode);
    if (!r)
      log::warn("cluster: tools of client ", *client_id, " from node ", from,
                " were refused here: ", r.error().message);
    return;
  }
  if (*op == "unregister") {
    auto ids = clienttool::parse_string_list(*o, "toolIDs");
    if (!ids || !*ids) return;
    registry_->unregister(*client_id, **ids, Origin::OtherNode);
    return;
  }
  if (*op == "attach") {
    auto last_seq = unsigned_field(*o, "lastSeq").value_or(0);
    home_[*client_id] = from;
    local_.erase(*client_id);
    auto sink = std::make_shared<RemoteSink>(weak_from_this(), from, *client_id);
    remote_connection_[*client_id] =
        registry_->attach(*client_id, std::move(sink), last_seq,
                          string_field(*o, "transport").value_or(""), Origin::OtherNode);
    return;
  }
  if (*op == "detach") {
    // A disconnect from a node that is no longer the client's home (it connected elsewhere
    // since) changes nothing.
    auto it = home_.find(*client_id);
    if (it == home_.end() || it->second != from) return;
    home_.erase(it);
    if (auto conn = remote_connection_.find(*client_id); conn != remote_connection_.end()) {
      registry_->detach(*client_id, conn->second);
      remote_connection_.erase(conn);
    }
    return;
  }
  if (*op == "forget") {
    // Its grace ended at its home, and it connected nowhere since.
    if (!home_.count(*client_id)) registry_->cleanup(*client_id, Origin::OtherNode);
    return;
  }
  log::warn("cluster: node ", from, " sent the client message \"", *op,
            "\", which this node does not know");
}

bool ClientRelay::ready() const {
  return joined_once_ && (awaited_.empty() || std::chrono::steady_clock::now() >= ready_by_);
}

void ClientRelay::on_gone(const std::string& gone, bool lease_ended) {
  if (lease_ended) awaited_.erase(gone);  // it will not answer
  auto live = node_->status().nodes;      // sorted; the gone node is not among them any more
  bool speaks = lease_ended && !live.empty() && live.front() == node_->id();
  std::vector<std::string> clients;
  for (const auto& [client_id, home] : home_)
    if (home == gone) clients.push_back(client_id);
  for (const auto& client_id : clients) {
    home_.erase(client_id);
    if (auto conn = remote_connection_.find(client_id); conn != remote_connection_.end()) {
      registry_->detach(client_id, conn->second, speaks);
      remote_connection_.erase(conn);
    }
  }
  if (!clients.empty())
    log::info("cluster: ", clients.size(), " client(s) of node ", gone,
              " are disconnected (they may connect to another node within their grace)");
}

void ClientRelay::announce_all() {
  for (const auto& [client_id, sink] : local_) {
    auto home = home_.find(client_id);
    if (sink.expired() || home == home_.end() || home->second != node_->id()) continue;
    // Only what it has not had: a request that was delivered waits for its answer there.
    announce(client_id, std::numeric_limits<std::uint64_t>::max(), "relay");
  }
}

}  // namespace sb::cluster
