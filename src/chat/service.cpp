#include "chat/service.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "util/ids.hpp"
#include "util/log.hpp"
#include "util/text.hpp"

namespace sb::chat {

namespace asio = boost::asio;

namespace {

// The session an event is about, wherever its shape keeps it.
std::string session_of_event(const json::object& props) {
  if (auto id = string_or(props, "sessionID"); !id.empty()) return id;
  for (std::string_view key : {"part", "info", "request"})
    if (const json::object* inner = object_at(props, key))
      if (auto id = string_or(*inner, "sessionID"); !id.empty()) return id;
  return {};
}

json::object error_chunk(std::string text) {
  return json::object{{"type", "error"}, {"errorText", std::move(text)}};
}

// What the app's tool returned, as the model reads it: text as it is, anything else as JSON.
clienttool::ToolResponse tool_response(const ToolOutput& output) {
  clienttool::ToolResponse response;
  response.success = output.ok;
  if (!output.ok)
    response.error = output.error;
  else if (output.output.is_string())
    response.output = std::string(output.output.get_string());
  else if (!output.output.is_null())
    response.output = json::serialize(output.output);
  return response;
}

}  // namespace

std::shared_ptr<ChatService> ChatService::create(ChatDeps deps, ChatOptions options) {
  return std::shared_ptr<ChatService>(new ChatService(std::move(deps), options));
}

ChatService::ChatService(ChatDeps deps, ChatOptions options)
    : deps_(std::move(deps)), options_(options) {}

asio::awaitable<Result<std::optional<std::string>>> ChatService::session_of(std::string chat_id) {
  if (auto it = chats_.find(chat_id); it != chats_.end())
    co_return std::optional<std::string>{it->second->session_id};
  // Named before the co_await (SessionStore::run).
  auto read = [chat_id](session::SessionStore& store) -> Result<std::optional<std::string>> {
    auto stored = store.get_chat(chat_id);
    if (!stored) return stored.error();
    if (!*stored) return std::optional<std::string>{};
    // A chat whose session was deleted is a chat never used.
    auto session = store.get_session(**stored);
    if (!session) return session.error();
    if (!*session) return std::optional<std::string>{};
    return stored;
  };
  co_return co_await deps_.store->run(std::move(read));
}

asio::awaitable<Result<std::shared_ptr<ChatService::Chat>>> ChatService::open_chat(
    const ChatRequest& request) {
  auto self = shared_from_this();
  std::string client_id = request.client_id.value_or("");
  if (auto it = chats_.find(request.chat_id); it != chats_.end()) {
    std::shared_ptr<Chat> chat = it->second;
    // A chat kept between turns whose session was deleted meanwhile is a new chat.
    if (!chat->stream) {
      auto session = co_await deps_.sessions->get_session(chat->session_id);
      if (!session && session.error().code != ErrorCode::NotFound) co_return session.error();
      if (!session) {
        if (auto again = chats_.find(request.chat_id);
            again != chats_.end() && again->second == chat)
          forget(chat->id);
        co_return co_await open_chat(request);
      }
      if (auto own = session::SessionService::client_may_use(client_id, *session); !own)
        co_return own.error();
    } else if (auto own =
                   co_await deps_.sessions->validate_client_session(client_id, chat->session_id);
               !own) {
      co_return own.error();
    }
    idle_.remove(chat->id);
    co_return chat;
  }
  // Two first messages of a chat at once would each make a session.
  if (opening_.count(request.chat_id))
    co_return make_error(ErrorCode::Conflict, "chat " + request.chat_id +
                                                  " is being opened by another request; try "
                                                  "again when it has answered");
  opening_.insert(request.chat_id);
  struct Opened {
    std::set<std::string>& opening;
    const std::string& id;
    ~Opened() { opening.erase(id); }
  } opened{opening_, request.chat_id};
  auto stored = co_await session_of(request.chat_id);
  if (!stored) co_return stored.error();
  std::string session_id;
  if (*stored) {
    session_id = **stored;
    if (auto own = co_await deps_.sessions->validate_client_session(client_id, session_id); !own)
      co_return own.error();
  } else {
    session::CreateInput input;
    if (request.user_text) input.title = std::string(utf8_prefix(trim(*request.user_text), 80));
    input.client_id = client_id;
    auto created = co_await deps_.sessions->create_session(std::move(input));
    if (!created) co_return created.error();
    session_id = created->id;
    if (auto r = co_await deps_.store->call(&session::SessionStore::put_chat, request.chat_id,
                                            session_id);
        !r)
      co_return r.error();
  }
  auto chat = std::make_shared<Chat>();
  chat->id = request.chat_id;
  chat->session_id = session_id;
  chat->app_client = "chat-" + session_id;
  chats_.emplace(chat->id, chat);
  by_session_[session_id] = chat->id;
  co_return chat;
}

void ChatService::set_streaming(Chat& chat, std::unique_ptr<TurnStream> stream) {
  bool was = chat.stream != nullptr;
  chat.stream = std::move(stream);
  bool is = chat.stream != nullptr;
  if (was == is) return;
  streaming_ += is ? 1 : -1;
  // The bus builds events only for someone to read them: subscribed while a chat has a turn.
  if (is && streaming_ == 1)
    subscription_ = deps_.bus->subscribe([weak = weak_from_this()](const bus::EventPtr& event) {
      if (auto self = weak.lock()) self->on_event(event);
    });
  if (!is && streaming_ == 0) subscription_.reset();
}

void ChatService::rest(const std::shared_ptr<Chat>& chat) {
  set_streaming(*chat, nullptr);
  for (auto& waiter : std::exchange(chat->idle_waiters, {}))
    waiter->cancel();
  if (chat->response) chat->response->end();
  chat->backlog.clear();
  // Kept for its next turn (its session and tools are ready), the least recently used first
  // to go.
  idle_.remove(chat->id);
  idle_.push_back(chat->id);
  while (idle_.size() > options_.kept_chats)
    forget(idle_.front());
}

void ChatService::forget(const std::string& chat_id) {
  auto it = chats_.find(chat_id);
  if (it == chats_.end()) return;
  auto chat = it->second;
  chats_.erase(it);
  idle_.remove(chat_id);
  by_session_.erase(chat->session_id);
  if (!chat->app_tools.empty()) deps_.client_tools->cleanup(chat->app_client);
  for (auto& waiter : chat->idle_waiters)
    waiter->cancel();
  if (chat->response) chat->response->end();
  set_streaming(*chat, nullptr);
}

void ChatService::on_event(const bus::EventPtr& event) {
  std::string session_id = session_of_event(event->properties);
  if (session_id.empty()) return;
  auto id = by_session_.find(session_id);
  if (id == by_session_.end()) return;
  auto it = chats_.find(id->second);
  if (it == chats_.end()) return;
  std::shared_ptr<Chat> chat = it->second;  // held: forget() may drop the table's
  if (!chat->stream) return;
  switch (chat->stream->on_event(*event)) {
    case TurnStream::Effect::Suspended:
      if (chat->response) chat->response->end();
      break;
    case TurnStream::Effect::Ended:
      rest(chat);
      break;
    case TurnStream::Effect::None:
      break;
  }
}

void ChatService::emit(Chat& chat, const json::object& chunk) {
  if (chat.response && !chat.response->ended())
    chat.response->append(chunk);
  else
    chat.backlog.push_back(chunk);
}

std::shared_ptr<ChatResponse> ChatService::new_response(Chat& chat) {
  chat.response = std::make_shared<ChatResponse>();
  chat.response->append(json::object{{"type", "start"}, {"messageId", chat.message_id}});
  chat.response->append(
      json::object{{"type", "data-session"},
                   {"id", "session"},
                   {"data", json::object{{"sessionID", chat.session_id}, {"chatID", chat.id}}}});
  for (auto& chunk : std::exchange(chat.backlog, {}))
    chat.response->append(chunk);
  return chat.response;
}

Result<void> ChatService::register_app_tools(Chat& chat, const ChatRequest& request) {
  if (!request.tools) return {};
  // The same tools as the chat's last request (the app sends them with each): nothing to do.
  std::string key;
  for (const auto& spec : *request.tools) {
    key += spec.name + '\n' + spec.description + '\n' + json::serialize(spec.parameters) +
           (spec.interactive ? "\n1\n" : "\n0\n");
  }
  if (key == chat.app_tools_key) return {};
  if (auto r = clienttool::check_spec_limits(*request.tools, {}, options_.tool_limits, "tools"); !r)
    return r.error();
  std::map<std::string, bool> names;
  for (const auto& spec : *request.tools) {
    // The server's own tool of that name would win, and the app's would never be called.
    if (auto t = deps_.tools->find(spec.name, chat.session_id); t && !tool::client_definition(*t))
      return make_error(ErrorCode::InvalidRequest,
                        "tools." + spec.name +
                            ": the server has a tool of this name; name the app's tool "
                            "differently");
    names.emplace(spec.name, spec.interactive);
  }
  if (!chat.app_tools.empty()) deps_.client_tools->unregister(chat.app_client, std::nullopt);
  chat.app_tools.clear();
  chat.app_tools_key.clear();
  if (names.empty()) return {};
  auto registered = deps_.client_tools->register_tools(chat.app_client, *request.tools,
                                                       chat.session_id, /*plain_names=*/true);
  if (!registered) return registered.error();
  chat.app_tools = std::move(names);
  chat.app_tools_key = std::move(key);
  return {};
}

asio::awaitable<Result<std::shared_ptr<ChatResponse>>> ChatService::start_turn(
    std::shared_ptr<Chat> chat, const ChatRequest& request, std::string text,
    std::string answer_again) {
  auto self_ref = shared_from_this();
  if (auto r = register_app_tools(*chat, request); !r) {
    rest(chat);
    co_return r.error();
  }
  chat->resumable = request.resumable;
  chat->message_id = ids::make("msg");
  chat->backlog.clear();
  auto client_tools = deps_.client_tools;
  auto app_tools = chat->app_tools;
  std::string own_client = request.client_id.value_or("");
  // The app answers its own tools, and those of its client while that client has no connection.
  auto app_tool = [client_tools, app_tools,
                   own_client](const std::string& tool) -> std::optional<std::string> {
    if (app_tools.count(tool)) return tool;
    if (own_client.empty()) return std::nullopt;
    auto def = client_tools->get_tool(tool);
    if (!def || def->client_id != own_client || client_tools->is_connected(own_client))
      return std::nullopt;
    return def->name;
  };
  std::weak_ptr<Chat> weak_chat = chat;
  auto self = weak_from_this();
  set_streaming(*chat, std::make_unique<TurnStream>(chat->session_id, std::move(app_tool),
                                                    [self, weak_chat](const json::object& chunk) {
                                                      auto service = self.lock();
                                                      auto c = weak_chat.lock();
                                                      if (service && c) service->emit(*c, chunk);
                                                    }));
  auto response = new_response(*chat);
  session::PromptInput input;
  input.text = std::move(text);
  input.answer_again = std::move(answer_again);
  input.model = request.model;
  input.agent = request.agent;
  if (auto started = co_await deps_.sessions->prompt_async(chat->session_id, std::move(input));
      !started) {
    response->end();
    rest(chat);
    co_return started.error();
  }
  co_return response;
}

std::shared_ptr<ChatResponse> ChatService::continue_turn(Chat& chat, const ChatRequest& request) {
  chat.stream->resume();
  auto response = new_response(chat);
  auto& calls = chat.stream->calls();
  // Approvals first, then refusals: a refusal also refuses the session's other asks.
  std::vector<const ApprovalAnswer*> ordered;
  for (const auto& a : request.approvals)
    if (a.approved) ordered.push_back(&a);
  for (const auto& a : request.approvals)
    if (!a.approved) ordered.push_back(&a);
  for (const ApprovalAnswer* a : ordered) {
    auto it = calls.find(a->call_id);
    if (it == calls.end() || it->second.approval_id != a->approval_id) continue;  // answered before
    CallView& c = it->second;
    if (!a->approved) c.denied = true;
    auto replied = deps_.permissions->reply(
        a->approval_id, a->approved ? permission::Reply::Once : permission::Reply::Reject,
        a->approved ? std::nullopt : a->reason);
    if (!replied) {
      c.denied = false;
      emit(chat, error_chunk("approval " + a->approval_id + ": " + replied.error().message));
    }
  }
  for (const auto& output : request.outputs) {
    auto it = calls.find(output.call_id);
    if (it == calls.end()) {
      emit(chat, error_chunk("tool call " + output.call_id +
                             " is not a call of this chat's turn; its output was not used"));
      continue;
    }
    CallView& c = it->second;
    if (!c.app || c.answered) continue;  // the server's tool, or answered before: history
    if (!c.request_id.empty()) {
      std::string request_id = c.request_id;
      c.answered = true;
      auto submitted =
          deps_.client_tools->submit_result(request_id, std::nullopt, tool_response(output));
      if (submitted) continue;
      c.answered = false;
      emit(chat, error_chunk("tool call " + output.call_id + ": " + submitted.error().message));
    } else if (!c.reported_late) {
      c.reported_late = true;
      emit(chat, error_chunk("tool call " + output.call_id + " had already ended" +
                             (c.ended_how.empty() ? std::string() : " (" + c.ended_how + ")") +
                             "; its output was not used"));
    }
  }
  // What the answers left waiting still waits: the response ends at once.
  if (chat.response == response && chat.stream->should_suspend()) {
    chat.stream->suspend();
    response->end();
  }
  return response;
}

std::shared_ptr<ChatResponse> ChatService::answer_late(Chat& chat, const ChatRequest& request) {
  chat.message_id = request.message_id.value_or(ids::make("msg"));
  auto response = std::make_shared<ChatResponse>();
  response->append(json::object{{"type", "start"}, {"messageId", chat.message_id}});
  for (const auto& output : request.outputs)
    response->append(error_chunk("tool call " + output.call_id +
                                 " is not waiting for an output: the turn it belonged to has "
                                 "ended; its output was not used"));
  for (const auto& approval : request.approvals)
    response->append(error_chunk("approval " + approval.approval_id +
                                 " is not waiting for an answer: the turn it belonged to has "
                                 "ended"));
  response->append(json::object{{"type", "finish"}});
  response->end();
  return response;
}

asio::awaitable<Result<std::shared_ptr<ChatResponse>>> ChatService::send(ChatRequest request) {
  for (int attempt = 0;; ++attempt) {
    auto opened = co_await open_chat(request);
    if (!opened) co_return opened.error();
    std::shared_ptr<Chat> chat = std::move(*opened);
    bool running = deps_.sessions->running(chat->session_id);
    bool waits_for_app = running && chat->stream && chat->stream->suspended();
    if (running) {
      if (chat->response && !chat->response->ended())
        co_return make_error(ErrorCode::Conflict,
                             "chat " + chat->id +
                                 " is answering now; wait for its answer, or stop it (DELETE "
                                 "/api/chat/" +
                                 chat->id + "/stream)");
      if (!chat->stream) {
        // A turn of the session that the chat did not start (the session API's).
        rest(chat);
        co_return make_error(ErrorCode::Conflict, "chat " + chat->id +
                                                      "'s session runs a turn that the chat did "
                                                      "not start; wait for it to end");
      }
      // Answers, or a look at what the turn did since the last response: the rest streams.
      if (!request.user_text && request.trigger == ChatRequest::Trigger::Submit)
        co_return continue_turn(*chat, request);
      if (!waits_for_app)
        co_return make_error(ErrorCode::Conflict,
                             "chat " + chat->id + " is busy with a turn; wait for it to end");
      // A new message (or a regenerate) instead of the answers: that turn ends first.
      if (attempt > 0)
        co_return make_error(ErrorCode::Conflict,
                             "chat " + chat->id + ": its waiting turn did not end in time");
      deps_.sessions->abort(chat->session_id, "superseded by a new message of the chat");
      auto timer = std::make_shared<asio::steady_timer>(deps_.executor, options_.supersede_wait);
      chat->idle_waiters.push_back(timer);
      co_await timer->async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    // What follows awaits the store before the turn is registered: a second request of the chat
    // meanwhile would take this one's stream.
    if (chat->starting)
      co_return make_error(ErrorCode::Conflict,
                           "chat " + chat->id + " is starting a turn; wait for its answer");
    chat->starting = true;
    struct Started {
      Chat& chat;
      ~Started() { chat.starting = false; }
    } started{*chat};
    if (request.trigger == ChatRequest::Trigger::Regenerate) {
      auto question = co_await deps_.sessions->remove_last_answer(chat->session_id);
      if (!question) {
        rest(chat);
        co_return question.error();
      }
      std::string no_text;
      co_return co_await start_turn(chat, request, std::move(no_text), std::move(*question));
    }
    if (!request.user_text) {
      auto response = answer_late(*chat, request);
      rest(chat);
      co_return response;
    }
    std::string text = *request.user_text;
    std::string new_message;  // named: GCC 12 and a default argument inside co_await
    co_return co_await start_turn(chat, request, std::move(text), std::move(new_message));
  }
}

asio::awaitable<Result<std::shared_ptr<ChatResponse>>> ChatService::active(std::string chat_id) {
  if (auto it = chats_.find(chat_id); it != chats_.end()) {
    auto& response = it->second->response;
    if (response && !response->ended()) co_return response;
    co_return std::shared_ptr<ChatResponse>();
  }
  auto session = co_await session_of(chat_id);
  if (!session) co_return session.error();
  if (!*session) co_return make_error(ErrorCode::NotFound, "no chat " + chat_id);
  co_return std::shared_ptr<ChatResponse>();
}

void ChatService::reader_left(const std::string& chat_id,
                              const std::shared_ptr<ChatResponse>& response) {
  auto it = chats_.find(chat_id);
  if (it == chats_.end()) return;
  auto chat = it->second;
  if (chat->resumable || chat->response != response || response->ended()) return;
  deps_.sessions->abort(chat->session_id, "the chat's response was closed (stop)");
}

asio::awaitable<Result<bool>> ChatService::stop(std::string chat_id) {
  auto session = co_await session_of(chat_id);
  if (!session) co_return session.error();
  if (!*session) co_return make_error(ErrorCode::NotFound, "no chat " + chat_id);
  co_return deps_.sessions->abort(**session, "stopped by the app");
}

}  // namespace sb::chat
