// SessionService's revert, unrevert and diff (declared in service.hpp; the work is in
// revert.cpp): a revert or an unrevert waits for no turn (Conflict while one runs, as OpenCode's
// SessionBusyError), and a turn's start makes a revert final.
//
// The work (store calls and file writes) runs as one store call (SessionStore::run: on the
// store's thread on PostgreSQL); what it publishes is gathered on a bus of its own there and
// published on the server's bus when it is done, on the loop.
#include "session/revert.hpp"
#include "session/service.hpp"

namespace sb::session {

namespace asio = boost::asio;

namespace {

// Events published off the loop, kept to be published on it.
struct StagedEvents {
  std::shared_ptr<bus::EventBus> bus = bus::EventBus::create();
  std::vector<bus::EventPtr> events;
  bus::Subscription subscription =
      bus->subscribe([this](const bus::EventPtr& e) { events.push_back(e); });
  StagedEvents() = default;
  StagedEvents(const StagedEvents&) = delete;
};

// Runs `work(store, bus)` as one store call and publishes what it published on `bus`. Lambdas are
// named before they go into a co_await (SessionStore::run: GCC 12).
template <class Work>
asio::awaitable<std::invoke_result_t<Work&, SessionStore&, bus::EventBus&>> run_publishing(
    SessionStore& store, bus::EventBus& bus, Work work) {
  auto staged = std::make_shared<StagedEvents>();
  auto job = [work = std::move(work), staged](SessionStore& s) mutable {
    return work(s, *staged->bus);
  };
  auto result = co_await store.run(std::move(job));
  for (const auto& e : staged->events)
    bus.publish(e->type, e->properties);
  co_return result;
}

}  // namespace

asio::awaitable<Result<SessionInfo>> SessionService::revert(std::string session_id,
                                                            std::string message_id,
                                                            std::string part_id) {
  auto self = shared_from_this();
  auto idle = co_await hold_idle(session_id);
  if (!idle) co_return idle.error();
  auto all = co_await messages(session_id);  // NotFound for an unknown session
  if (!all) co_return all.error();
  auto point = revert_point(*all, message_id, part_id);
  if (!point) co_return point.error();
  auto session = co_await get_session(session_id);
  if (!session) co_return session.error();
  auto work = [session = std::move(*session), point = *point](SessionStore& s,
                                                              bus::EventBus& b) mutable {
    return revert_files(s, b, std::move(session), point);
  };
  co_return co_await run_publishing(*deps_.store, *deps_.bus, std::move(work));
}

asio::awaitable<Result<SessionInfo>> SessionService::unrevert(std::string session_id) {
  auto self = shared_from_this();
  auto idle = co_await hold_idle(session_id);
  if (!idle) co_return idle.error();
  auto session = co_await get_session(session_id);
  if (!session) co_return session.error();
  auto work = [session = std::move(*session)](SessionStore& s, bus::EventBus& b) mutable {
    return unrevert_files(s, b, std::move(session));
  };
  co_return co_await run_publishing(*deps_.store, *deps_.bus, std::move(work));
}

asio::awaitable<Result<json::array>> SessionService::diff(std::string session_id,
                                                          std::string message_id) {
  auto self = shared_from_this();
  auto all = co_await messages(session_id);
  if (!all) co_return all.error();
  auto session = co_await get_session(session_id);
  if (!session) co_return session.error();
  auto read = [session = std::move(*session), all = std::move(*all), message_id](SessionStore& s) {
    return session_diff(s, session, all, message_id);
  };
  co_return co_await deps_.store->run(std::move(read));
}

asio::awaitable<Result<SessionInfo>> SessionService::settle_revert(SessionInfo session) {
  auto self = shared_from_this();
  auto all = co_await messages(session.id);
  if (!all) co_return all.error();
  auto work = [session = std::move(session), all = std::move(*all)](SessionStore& s,
                                                                    bus::EventBus& b) mutable {
    return commit_revert(s, b, std::move(session), all);
  };
  auto settled = co_await run_publishing(*deps_.store, *deps_.bus, std::move(work));
  // The model must not see the messages that went.
  if (settled) conversations_->forget(settled->id);
  co_return settled;
}

}  // namespace sb::session
