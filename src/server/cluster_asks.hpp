#pragma once
// What a node of a cluster asks the others and answers them (cluster::Node's asks): a reply to a
// permission ask or a question waits on the node whose turn asked, an abort goes to the node that
// runs the turn, and the lists of what waits (and which sessions are busy) are every node's.
// The HTTP routes decide who may ask (tokens); the node that has the thing checks whose session
// it is, as it does for a request of its own.
#include <boost/asio/awaitable.hpp>
#include <boost/json.hpp>

#include <optional>
#include <string>

#include "server/http.hpp"

namespace sb::server {

// Registers this node's answers on state.cluster (before it starts).
void answer_cluster_asks(ServerState& state);

// The node that has it answers `op` (ops in cluster_asks.cpp): its outcome, or `missing` when no
// other node has it.
asio::awaitable<Result<void>> ask_the_node_that_has_it(ServerState& state, std::string op,
                                                       json::object args, Error missing);
// True when another node ran the session's turn and aborted it.
asio::awaitable<Result<bool>> abort_on_another_node(ServerState& state,
                                                    const std::string& session_id);
// `op`'s list ("permission.list", "question.list") of every other node, appended to `out`;
// `op` "session.status": their busy sessions, merged into `out`'s object.
asio::awaitable<Result<void>> gather_from_other_nodes(ServerState& state, std::string op,
                                                      json::value& out);

}  // namespace sb::server
