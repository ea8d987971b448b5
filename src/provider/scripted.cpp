// The scripted model: replays a JSON script of steps, for tests, demos and for trying client
// tools without a real model. Stateless: the step a request gets is the number of assistant
// messages already in its history, so a restarted server continues where it was.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "provider/provider.hpp"
#include "util/ids.hpp"

namespace sb::provider {
namespace {

constexpr auto tuple_awaitable = boost::asio::as_tuple(boost::asio::use_awaitable);

std::string replace_all(std::string text, std::string_view from, std::string_view to) {
  for (std::size_t pos = 0; (pos = text.find(from, pos)) != std::string::npos; pos += to.size())
    text.replace(pos, from.size(), to);
  return text;
}

// What the script's text may refer to.
struct History {
  std::string last_user_text;
  std::string last_user_files;  // "image/png one.png (67 bytes), ..." of the last user message
  std::string last_tool_output;
  std::size_t assistant_turns = 0;
  bool ends_with_tool_results = false;
  std::vector<std::string> tool_outputs;  // the results that end the history, in order
};

// What the model got of a message's files: "MIME NAME (N bytes)" each, or the note a model
// that does not take the kind reads.
std::string describe_files(const ModelMessage& m, const InputKinds& input) {
  std::string out;
  for (const auto& a : m.attachments) {
    if (!out.empty()) out += ", ";
    if (!a.accepted_by(input)) {
      out += a.refused_note();
      continue;
    }
    // Base64 of n bytes has 4 characters for every 3, the last group padded with '='.
    std::string_view b64 = a.base64();
    std::size_t padding = b64.ends_with("==") ? 2 : b64.ends_with('=') ? 1 : 0;
    out += a.mime + " " + (a.filename.empty() ? std::string("(unnamed)") : a.filename) + " (" +
           std::to_string(b64.size() / 4 * 3 - padding) + " bytes)";
  }
  return out;
}

History summarize(const ModelRequest& request) {
  History h;
  for (const auto& m : request.messages) {
    if (m.role == Role::Assistant) ++h.assistant_turns;
    if (m.role == Role::User) {
      h.last_user_text = m.text;
      h.last_user_files = describe_files(m, request.input);
    }
    if (m.role == Role::Tool) h.last_tool_output = m.output;
  }
  for (auto it = request.messages.rbegin(); it != request.messages.rend() && it->role == Role::Tool;
       ++it) {
    h.ends_with_tool_results = true;
    h.tool_outputs.insert(h.tool_outputs.begin(), it->output);
  }
  return h;
}

// With no script: "/call TOOL {json}" calls a tool, tool results are reported back, anything
// else is echoed.
json::object echo_step(const History& h) {
  if (h.ends_with_tool_results) {
    std::string text = "Tool results:";
    for (const auto& out : h.tool_outputs)
      text += "\n" + out;
    return json::object{{"text", text}};
  }
  std::string_view t = h.last_user_text;
  if (t.starts_with("/call ")) {
    t.remove_prefix(6);
    auto space = t.find(' ');
    std::string tool(t.substr(0, space));
    json::value input = json::object{};
    if (space != std::string_view::npos) {
      auto parsed = parse_json(t.substr(space + 1));
      if (!parsed)
        return json::object{{"text", "Scripted model: the input after /call " + tool +
                                         " is not JSON (" + parsed.error().message + ")"}};
      input = std::move(*parsed);
    }
    return json::object{{"toolCalls", json::array{json::object{{"tool", tool}, {"input", input}}}}};
  }
  std::string files = h.last_user_files.empty() ? "" : "\nFiles: " + h.last_user_files;
  return json::object{{"text", "Echo: " + h.last_user_text + files}};
}

class ScriptedProvider final : public ModelProvider {
 public:
  ScriptedProvider(std::string id, json::array script, InputKinds input)
      : id_(std::move(id)), script_(std::move(script)), input_(input) {}
  const std::string& id() const override { return id_; }
  std::string type() const override { return "scripted"; }
  std::vector<std::string> models() const override { return {"default"}; }
  InputKinds input() const override { return input_; }

  boost::asio::awaitable<void> stream(const ModelRequest& request, EventHandler on_event,
                                      std::shared_ptr<AbortSignal> abort) override {
    History h = summarize(request);
    json::object step;
    if (script_.empty()) {
      step = echo_step(h);
    } else if (h.assistant_turns < script_.size() && script_[h.assistant_turns].is_object()) {
      step = script_[h.assistant_turns].get_object();
    } else {
      step = json::object{{"text", "(scripted model: the script has no step " +
                                       std::to_string(h.assistant_turns + 1) + ")"}};
    }
    auto executor = co_await boost::asio::this_coro::executor;
    // Shared with the abort's posted cancel, which may run after the wait ended by itself and
    // this frame is gone (an abort as the delay runs out).
    auto timer = std::make_shared<boost::asio::steady_timer>(executor);
    auto pause = [&](std::int64_t ms) -> boost::asio::awaitable<bool> {
      if (ms <= 0) co_return !(abort && abort->aborted());
      timer->expires_after(std::chrono::milliseconds(ms));
      AbortSignal::Registration reg(
          abort, [timer, executor] { boost::asio::post(executor, [timer] { timer->cancel(); }); });
      co_await timer->async_wait(tuple_awaitable);
      co_return !(abort && abort->aborted());
    };
    auto num = [&](std::string_view key) -> std::int64_t {
      auto v = get_int(step, key);
      return v && *v ? **v : 0;
    };
    std::int64_t chunk_delay = num("chunkDelayMs");

    if (!co_await pause(num("delayMs"))) {
      on_event(StreamError{"aborted", false, 0});
      co_return;
    }
    if (auto e = step.find("error"); e != step.end()) {
      std::string message = "scripted error";
      int status = 0;
      if (e->value().is_string()) message = std::string(e->value().get_string());
      if (e->value().is_object()) {
        const auto& eo = e->value().get_object();
        if (auto m = get_string(eo, "message"); m && *m) message = **m;
        if (auto s = get_int(eo, "status"); s && *s) status = static_cast<int>(**s);
      }
      bool retryable = status == 429 || status >= 500;
      on_event(StreamError{id_ + " answered HTTP " + std::to_string(status) + ": " + message,
                           retryable, status});
      co_return;
    }
    Usage usage;
    for (const auto& m : request.messages)
      usage.input += static_cast<std::int64_t>((m.text.size() + m.output.size()) / 4 + 1);

    auto stream_text = [&](const std::string& text,
                           bool reasoning) -> boost::asio::awaitable<bool> {
      // Word by word, so that clients see a real stream of deltas.
      std::size_t pos = 0;
      while (pos < text.size()) {
        std::size_t next = text.find(' ', pos);
        next = next == std::string::npos ? text.size() : next + 1;
        std::string piece = text.substr(pos, next - pos);
        if (reasoning)
          on_event(ReasoningDelta{piece});
        else
          on_event(TextDelta{piece});
        usage.output += static_cast<std::int64_t>(piece.size() / 4 + 1);
        pos = next;
        if (chunk_delay && !co_await pause(chunk_delay)) co_return false;
      }
      co_return true;
    };
    auto expand = [&](std::string text) {
      text = replace_all(std::move(text), "{{lastUserText}}", h.last_user_text);
      text = replace_all(std::move(text), "{{lastUserFiles}}", h.last_user_files);
      return replace_all(std::move(text), "{{lastToolOutput}}", h.last_tool_output);
    };
    if (auto r = get_string(step, "reasoning"); r && *r) {
      if (!co_await stream_text(expand(**r), true)) {
        on_event(StreamError{"aborted", false, 0});
        co_return;
      }
    }
    if (auto t = get_string(step, "text"); t && *t) {
      if (!co_await stream_text(expand(**t), false)) {
        on_event(StreamError{"aborted", false, 0});
        co_return;
      }
    }
    if (auto cut = get_bool(step, "streamCut"); cut && *cut && **cut) {
      on_event(StreamError{std::string(kStreamEndedEarly), true, 0});
      co_return;
    }
    bool called = false;
    if (auto calls = get_array(step, "toolCalls"); calls && *calls) {
      for (const auto& c : **calls) {
        if (!c.is_object()) continue;
        const auto& co = c.get_object();
        ToolCall call;
        call.id = ids::make("call");
        if (auto name = get_string(co, "tool"); name && *name) call.name = **name;
        if (auto raw = get_string(co, "rawInput"); raw && *raw) {
          // A deliberately malformed call, to exercise the `invalid` tool.
          call.raw_input = **raw;
          parse_tool_input(call);
        } else {
          auto it = co.find("input");
          call.input = it == co.end() ? json::value(json::object{}) : it->value();
          call.raw_input = json::serialize(call.input);
        }
        on_event(ToolInputStart{0, call.id, call.name});
        on_event(ToolInputDelta{call.id, call.raw_input});
        on_event(std::move(call));
        called = true;
      }
    }
    FinishReason reason = called ? FinishReason::ToolCalls : FinishReason::Stop;
    if (auto f = get_string(step, "finish"); f && *f && **f == "length")
      reason = FinishReason::Length;
    on_event(StepFinish{reason, usage, std::string(finish_reason_name(reason))});
  }

 private:
  std::string id_;
  json::array script_;
  InputKinds input_;
};

}  // namespace

ProviderPtr make_scripted_provider(std::string id, json::array script, InputKinds input) {
  return std::make_shared<ScriptedProvider>(std::move(id), std::move(script), input);
}

}  // namespace sb::provider
