// Nodes of a cluster in one process, on the test command's Redis (each test's keys under a
// prefix of its own): membership, the event relay, and the asks between nodes.
#include "cluster/node.hpp"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include <map>

#include "cluster/test_util.hpp"

namespace sb::cluster {
namespace {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;

class NodeTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (auto& [id, node] : nodes_)
      run(io_, node->stop());
  }

  // Node `id` started, answering asks with `handler`.
  Node& start(const std::string& id, AskHandler handler = {},
              std::chrono::milliseconds lease = 1000ms) {
    NodeOptions options;
    options.redis_url = fixture_url();
    options.node_id = id;
    options.key_prefix = key(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ":";
    options.lease = lease;
    auto bus = bus::EventBus::create();
    auto node = Node::create(io_.get_executor(), options, bus);
    if (!node) throw std::runtime_error(node.error().message);
    buses_[id] = bus;
    if (handler) (*node)->on_ask(std::move(handler));
    (*node)->start([](bool) {});
    nodes_[id] = *node;
    return **node;
  }

  // Until every node lists `count` live nodes.
  bool all_see(std::size_t count) {
    return run_until(io_, [&] {
      for (auto& [id, node] : nodes_)
        if (node->status().nodes.size() != count) return false;
      return true;
    });
  }

  asio::io_context io_;
  std::map<std::string, std::shared_ptr<bus::EventBus>> buses_;
  std::map<std::string, std::shared_ptr<Node>> nodes_;
};

// Every other live node answers; the asker has the replies of those that had something to say,
// as soon as all have answered. A node alone asks nobody; a node that has not joined yet cannot
// say that nobody has it.
TEST_F(NodeTest, AnAskGetsTheRepliesOfTheNodesThatHaveIt) {
  REQUIRE_REDIS();
  NodeOptions unstarted;
  unstarted.redis_url = fixture_url();
  unstarted.node_id = "unstarted";
  auto early = Node::create(io_.get_executor(), unstarted, bus::EventBus::create());
  ASSERT_TRUE(early);
  auto too_early = run(io_, (*early)->ask("echo", json::object{}));
  ASSERT_FALSE(too_early);
  EXPECT_EQ(too_early.error().code, ErrorCode::Unavailable);
  EXPECT_NE(too_early.error().message.find("not joined"), std::string::npos)
      << too_early.error().message;

  Node& a = start("a");
  EXPECT_TRUE(all_see(1));
  auto alone = run(io_, a.ask("echo", json::object{}));
  ASSERT_TRUE(alone);
  EXPECT_TRUE(alone->replies.empty());
  EXPECT_TRUE(alone->silent.empty());

  start("b", [](std::string op, json::object args) -> asio::awaitable<json::value> {
    if (op != "echo") co_return nullptr;
    co_return json::object{{"from", "b"}, {"said", args.at("say")}};
  });
  start("c", [](std::string, json::object) -> asio::awaitable<json::value> { co_return nullptr; });
  ASSERT_TRUE(all_see(3));
  auto asked = Clock::now();
  auto answers = run(io_, a.ask("echo", json::object{{"say", "hi"}}));
  ASSERT_TRUE(answers) << answers.error().message;
  ASSERT_EQ(answers->replies.size(), 1u);
  EXPECT_EQ(answers->replies[0], (json::object{{"from", "b"}, {"said", "hi"}}));
  EXPECT_TRUE(answers->silent.empty());
  // Not the 2 s a node that does not answer costs.
  EXPECT_LT(Clock::now() - asked, Node::kAskTimeout / 2);
}

// A node that is in the cluster but does not answer (its loop is stuck, or it is dying) holds
// an ask up for kAskTimeout at most; the others' replies still come back.
TEST_F(NodeTest, ANodeThatDoesNotAnswerCostsTheAskTimeoutAndNoMore) {
  REQUIRE_REDIS();
  Node& a = start("a");
  start("b", [](std::string, json::object) -> asio::awaitable<json::value> { co_return "b here"; });
  ASSERT_TRUE(all_see(2));
  // A member whose lease is alive but who never reads its channel.
  RedisOptions options;
  options.url = fixture_url();
  auto redis = RedisClient::create(io_.get_executor(), options);
  ASSERT_TRUE(redis);
  std::string prefix = key(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ":";
  auto set = run(io_, (*redis)->command({"SET", prefix + "node:ghost", "{}", "PX", "60000"}));
  ASSERT_TRUE(set);
  ASSERT_TRUE(run(io_, (*redis)->command({"SADD", prefix + "nodes", "ghost"})));
  ASSERT_TRUE(run_until(io_, [&] { return a.status().nodes.size() == 3; }));
  auto asked = Clock::now();
  auto answers = run(io_, a.ask("anything", json::object{}));
  auto took = Clock::now() - asked;
  ASSERT_TRUE(answers);
  EXPECT_EQ(answers->replies, std::vector<json::value>{"b here"});
  EXPECT_EQ(answers->silent, std::vector<std::string>{"ghost"});
  EXPECT_GE(took, Node::kAskTimeout - 100ms);
  EXPECT_LT(took, Node::kAskTimeout + 1s);

  // What one node alone has is done at the first reply that has it: the silent node costs
  // nothing, and is not named (the one that had it answered).
  asked = Clock::now();
  auto first = run(io_, a.ask("anything", json::object{}, true));
  ASSERT_TRUE(first);
  EXPECT_LT(Clock::now() - asked, Node::kAskTimeout / 2);
  EXPECT_EQ(first->replies, std::vector<json::value>{"b here"});
  EXPECT_TRUE(first->silent.empty());
  run(io_, (*redis)->command({"DEL", prefix + "node:ghost"}));
  (*redis)->close();
}

// A node that joined after the asker's last lease round is asked as soon as the asker has met it
// (its hello): a reply that only the new node has is not missed for up to a round.
TEST_F(NodeTest, ANodeThatWasMetIsAskedBeforeTheNextLeaseRound) {
  REQUIRE_REDIS();
  // Rounds every 10 s: the test ends long before a's second one.
  Node& a = start("a", {}, 30s);
  ASSERT_TRUE(all_see(1));
  Node& b = start(
      "b", [](std::string, json::object) -> asio::awaitable<json::value> { co_return "b has it"; },
      30s);
  ASSERT_TRUE(run_until(io_, [&] { return b.status().nodes.size() == 2; }));
  ASSERT_EQ(a.status().nodes.size(), 1u) << "a's second round came early";
  auto before = run(io_, a.ask("anything", json::object{}, true));
  ASSERT_TRUE(before);
  EXPECT_TRUE(before->replies.empty());  // a does not know b yet

  a.met("b");
  a.met("a");  // itself: no change
  EXPECT_EQ(a.status().nodes, (std::vector<std::string>{"a", "b"}));
  auto after = run(io_, a.ask("anything", json::object{}, true));
  ASSERT_TRUE(after) << after.error().message;
  EXPECT_EQ(after->replies, std::vector<json::value>{"b has it"});
  EXPECT_TRUE(after->silent.empty());
}

// Each node's events reach every other node's bus once, in order, marked with their origin, and
// never come back to their own.
TEST_F(NodeTest, EventsReachEveryOtherNodeOnceInOrder) {
  REQUIRE_REDIS();
  start("a");
  start("b");
  start("c");
  ASSERT_TRUE(all_see(3));
  std::map<std::string, std::vector<std::string>> seen;  // node -> "origin:n" in order
  std::vector<bus::Subscription> subscriptions;
  for (auto& [id, bus] : buses_)
    subscriptions.push_back(bus->subscribe([&seen, id = id](const bus::EventPtr& e) {
      seen[id].push_back((e->origin.empty() ? id : e->origin) + ":" +
                         std::to_string(e->properties.at("n").as_int64()));
    }));
  for (int n = 0; n < 50; ++n) {
    buses_["a"]->publish("test.event", json::object{{"n", n}});
    if (n % 10 == 0) buses_["b"]->publish("test.event", json::object{{"n", n}});
  }
  ASSERT_TRUE(run_until(io_, [&] {
    return seen["a"].size() == 55 && seen["b"].size() == 55 && seen["c"].size() == 55;
  }));
  run_for(io_, 300ms);  // nothing more arrives: no event twice
  std::vector<std::string> from_a, from_b;
  for (int n = 0; n < 50; ++n) {
    from_a.push_back("a:" + std::to_string(n));
    if (n % 10 == 0) from_b.push_back("b:" + std::to_string(n));
  }
  for (const std::string id : {"a", "b", "c"}) {
    std::vector<std::string> a_part, b_part;
    for (const auto& s : seen[id])
      (s[0] == 'a' ? a_part : b_part).push_back(s);
    EXPECT_EQ(a_part, from_a) << "node " << id;
    EXPECT_EQ(b_part, from_b) << "node " << id;
  }
}

// What a node send()s reaches the listeners of every other node, in order, with its id, and not
// its own; a node says when it is in the cluster (on_joined, once), and the others say when its
// lease ended (on_gone).
TEST_F(NodeTest, MessagesReachTheOtherNodesListenersAndJoinsAndDeparturesAreTold) {
  REQUIRE_REDIS();
  std::map<std::string, std::vector<std::string>> heard;  // node -> "from:payload"
  std::map<std::string, int> joined;
  std::vector<std::string> gone_for_a;
  auto make = [&](const std::string& id) {
    NodeOptions options;
    options.redis_url = fixture_url();
    options.node_id = id;
    options.key_prefix = key(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ":";
    options.lease = 1000ms;
    auto node = Node::create(io_.get_executor(), options, bus::EventBus::create());
    if (!node) throw std::runtime_error(node.error().message);
    (*node)->listen("chat", [&heard, id](std::string_view from, std::string_view payload) {
      heard[id].push_back(std::string(from) + ":" + std::string(payload));
    });
    (*node)->on_joined([&joined, id] { ++joined[id]; });
    if (id == "a")
      (*node)->on_gone([&gone_for_a](const std::string& node) { gone_for_a.push_back(node); });
    (*node)->start([](bool) {});
    nodes_[id] = *node;
  };
  make("a");
  make("b");
  make("c");
  ASSERT_TRUE(all_see(3));
  ASSERT_TRUE(run_until(io_, [&] { return joined["a"] && joined["b"] && joined["c"]; }));
  for (int n = 0; n < 20; ++n)
    nodes_["b"]->send("chat", std::to_string(n));
  ASSERT_TRUE(run_until(io_, [&] { return heard["a"].size() == 20 && heard["c"].size() == 20; }));
  run_for(io_, 200ms);
  std::vector<std::string> expected;
  for (int n = 0; n < 20; ++n)
    expected.push_back("b:" + std::to_string(n));
  EXPECT_EQ(heard["a"], expected);
  EXPECT_EQ(heard["c"], expected);
  EXPECT_TRUE(heard["b"].empty());  // not its own
  EXPECT_EQ(joined["a"], 1);

  // c stops (its key goes with it): a hears at its next round that c is gone.
  run(io_, nodes_["c"]->stop());
  nodes_.erase("c");
  ASSERT_TRUE(run_until(
      io_, [&] { return !gone_for_a.empty(); }, 5s));
  EXPECT_EQ(gone_for_a, std::vector<std::string>{"c"});
  EXPECT_EQ(joined["a"], 1);  // a itself never left
}

}  // namespace
}  // namespace sb::cluster
