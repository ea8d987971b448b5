// OpenCode's revert routes (their list: revert_routes(), in route.hpp): POST
// /session/{id}/revert and /unrevert answer the session (its `revert` set or cleared), GET
// /session/{id}/diff the FileDiffs of a message's turn or of the whole session
// (session/revert.hpp).
#include "server/decode.hpp"
#include "server/route.hpp"

namespace sb::server {

namespace {

asio::awaitable<Reply> revert_session(Call& c) {
  auto body = body_object(c.state, c.req);
  if (!body) co_return fail(c, body.error());
  auto request = decode_revert(*body);
  if (!request) co_return fail(c, request.error());
  auto s = co_await c.state.sessions->revert(c.params[0], request->message_id, request->part_id);
  if (!s) co_return fail(c, s.error());
  co_return ok(c, session::to_json(*s));
}

asio::awaitable<Reply> unrevert_session(Call& c) {
  auto s = co_await c.state.sessions->unrevert(c.params[0]);
  if (!s) co_return fail(c, s.error());
  co_return ok(c, session::to_json(*s));
}

asio::awaitable<Reply> session_diff(Call& c) {
  std::string message_id;
  if (auto q = c.url.params().find("messageID"); q != c.url.params().end()) {
    auto id = decode_message_id((*q).value, "messageID");
    if (!id) co_return fail(c, id.error());
    message_id = std::move(*id);
  }
  auto diff = co_await c.state.sessions->diff(c.params[0], message_id);
  if (!diff) co_return fail(c, diff.error());
  co_return ok(c, *diff);
}

}  // namespace

std::vector<Route> revert_routes() {
  return {
      {http::verb::post,
       {"session", "{sessionID}", "revert"},
       &revert_session,
       {.id = "session.revert",
        .summary = "Undo a session from a message (or part) on: its files are put back",
        .body = "RevertRequest",
        .answer = "Session",
        .statuses = "404 409"}},
      {http::verb::post,
       {"session", "{sessionID}", "unrevert"},
       &unrevert_session,
       {.id = "session.unrevert",
        .summary = "Undo a session's revert: its files as they were before it",
        .answer = "Session",
        .statuses = "400 404 409"}},
      {http::verb::get,
       {"session", "{sessionID}", "diff"},
       &session_diff,
       {.id = "session.diff",
        .summary = "What a session (or one message's turn) changed in the files",
        .answer = "SnapshotFileDiffList",
        .statuses = "404",
        .query = "diffMessageID"}},
  };
}

}  // namespace sb::server
