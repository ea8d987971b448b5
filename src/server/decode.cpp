#include "server/decode.hpp"

#include <charconv>
#include <chrono>

#include "clienttool/wire.hpp"

namespace sb::server {
namespace {

Error invalid(std::string message) {
  return make_error(ErrorCode::InvalidRequest, std::move(message));
}

// Moves a decoded field into place, or gives its error: one line per field.
template <class T, class Into>
Result<void> take(Result<T> decoded, Into& into) {
  if (!decoded) return decoded.error();
  into = std::move(*decoded);
  return {};
}

// A client's optional clientID, checked as a name when present.
Result<std::optional<std::string>> optional_client_id(const json::object& body) {
  auto id = get_string(body, "clientID");
  if (!id) return id.error();
  if (*id)
    if (auto valid = decode_client_id(**id); !valid) return valid.error();
  return std::move(*id);
}

// The fields every answer to a call has: which request, and (optionally) who answers.
template <class Answer>
Result<Answer> decode_answer(const json::object& body) {
  Answer out;
  if (auto r = take(require_string(body, "requestID"), out.request_id); !r) return r.error();
  if (auto r = take(optional_client_id(body), out.client_id); !r) return r.error();
  return out;
}

// A prompt's model: "PROVIDER/MODEL" or {providerID, modelID}; nullopt when absent.
Result<std::optional<std::string>> decode_model(const json::object& body) {
  auto it = body.find("model");
  if (it == body.end() || it->value().is_null()) return std::optional<std::string>();
  if (it->value().is_string()) return std::optional<std::string>(it->value().get_string());
  if (!it->value().is_object())
    return invalid("model must be \"PROVIDER/MODEL\" or {providerID, modelID}, got " +
                   std::string(kind_name(it->value())));
  auto p = require_string(it->value().get_object(), "providerID", "model");
  if (!p) return p.error();
  auto m = require_string(it->value().get_object(), "modelID", "model");
  if (!m) return m.error();
  return std::optional<std::string>(*p + "/" + *m);
}

}  // namespace

Result<std::string> decode_client_id(std::string_view id, std::string_view where) {
  if (!clienttool::valid_name(id))
    return invalid(std::string(where) + " must be 1-128 letters, digits, '_' or '-', got " +
                   json::serialize(json::string(id)));
  return std::string(id);
}

Result<RegisterRequest> decode_register(const json::object& body) {
  RegisterRequest out;
  if (auto r = take(optional_client_id(body), out.client_id); !r) return r.error();
  if (auto r = take(get_string(body, "sessionID"), out.session_id); !r) return r.error();
  auto it = body.find("tools");
  auto specs = clienttool::parse_tool_specs(it == body.end() ? nullptr : &it->value(), "tools");
  if (auto r = take(std::move(specs), out.tools); !r) return r.error();
  return out;
}

Result<UnregisterRequest> decode_unregister(const json::object& body) {
  UnregisterRequest out;
  if (auto r = take(optional_client_id(body), out.client_id); !r) return r.error();
  if (auto s = get_string(body, "sessionID"); !s) return s.error();
  if (auto r = take(clienttool::parse_string_list(body, "toolIDs"), out.tool_ids); !r)
    return r.error();
  return out;
}

Result<ResultRequest> decode_result(const json::object& body) {
  auto out = decode_answer<ResultRequest>(body);
  if (!out) return out;
  if (auto r = take(clienttool::parse_tool_response(body), out->response); !r) return r.error();
  return out;
}

Result<ProgressRequest> decode_progress(const json::object& body) {
  auto out = decode_answer<ProgressRequest>(body);
  if (!out) return out;
  auto metadata = get_object(body, "metadata");
  if (!metadata) return metadata.error();
  // Copied onto the heap: the body may live in the caller's stack buffer.
  if (*metadata) out->progress.metadata = json::object(**metadata, json::storage_ptr());
  if (auto r = take(get_string(body, "title"), out->progress.title); !r) return r.error();
  return out;
}

Result<clienttool::ExecuteParams> decode_execute(const json::object& body, json::storage_ptr sp) {
  clienttool::ExecuteParams params{.input = json::object(sp)};
  auto client_id = optional_client_id(body);
  if (!client_id) return client_id.error();
  params.client_id = client_id->value_or("");
  auto tool = get_string(body, "tool");
  if (!tool) return tool.error();
  auto tool_id = get_string(body, "toolID");
  if (!tool_id) return tool_id.error();
  params.tool = tool->value_or(tool_id->value_or(""));
  if (params.tool.empty()) return invalid("tool (or toolID) is required");
  auto input = get_object(body, "input");
  if (!input) return input.error();
  if (*input) params.input = **input;
  for (auto [key, field] :
       {std::pair{"sessionID", &params.session_id}, std::pair{"messageID", &params.message_id},
        std::pair{"callID", &params.call_id}}) {
    auto v = get_string(body, key);
    if (!v) return v.error();
    *field = v->value_or("");
  }
  auto timeout = get_int(body, "timeout");
  if (!timeout) return timeout.error();
  if (*timeout) {
    if (**timeout <= 0) return invalid("timeout must be a positive number of ms");
    params.timeout = std::chrono::milliseconds(**timeout);
  }
  return params;
}

Result<session::CreateInput> decode_create_session(const json::object& body) {
  session::CreateInput input;
  auto title = get_string(body, "title");
  if (!title) return title.error();
  input.title = title->value_or("");
  if (auto it = body.find("permission"); it != body.end()) {
    if (auto r = take(permission::parse_rules(it->value(), "permission"), input.permission); !r)
      return r.error();
  }
  auto client_id = optional_client_id(body);
  if (!client_id) return client_id.error();
  input.client_id = client_id->value_or("");
  auto parent = get_string(body, "parentID");
  if (!parent) return parent.error();
  input.parent_id = parent->value_or("");
  return input;
}

namespace {

// A prompt's file part (OpenCode's FilePartInput): {type: "file", mime, url, filename?, source?,
// id?}. What the url holds is read later (session/files.hpp).
Result<session::FileInput> decode_file_part(const json::object& part, const std::string& at) {
  session::FileInput file;
  if (auto r = take(require_string(part, "mime", at), file.mime); !r) return r.error();
  if (file.mime.empty()) return invalid(at + ".mime must not be empty (e.g. \"text/plain\")");
  if (auto r = take(require_string(part, "url", at), file.url); !r) return r.error();
  auto filename = get_string(part, "filename", at);
  if (!filename) return filename.error();
  file.filename = filename->value_or("");
  auto source = get_object(part, "source", at);
  if (!source) return source.error();
  // Copied onto the heap: the body may live in the caller's buffer.
  if (*source) file.source = json::object(**source, json::storage_ptr());
  return file;
}

}  // namespace

Result<session::PromptInput> decode_prompt(const json::object& body) {
  session::PromptInput in;
  auto parts = get_array(body, "parts");
  if (!parts) return parts.error();
  if (!*parts || (*parts)->empty())
    return invalid("parts is required: [{\"type\": \"text\", \"text\": \"...\"}]");
  for (std::size_t i = 0; i < (*parts)->size(); ++i) {
    const auto& p = (**parts)[i];
    std::string at = "parts[" + std::to_string(i) + "]";
    if (!p.is_object()) return invalid(at + " must be an object, got " + std::string(kind_name(p)));
    auto type = get_string(p.get_object(), "type", at);
    if (!type) return type.error();
    if (*type && **type == "file") {
      auto file = decode_file_part(p.get_object(), at);
      if (!file) return file.error();
      in.files.push_back(std::move(*file));
      in.file_at.push_back(i);
      continue;
    }
    if (*type && **type != "text")
      return invalid(at + ".type \"" + **type + "\" is not supported (text, file)");
    if (in.text.empty()) in.text_at = i;
    auto text = get_string(p.get_object(), "text", at);
    if (!text) return text.error();
    if (!*text) return invalid(at + ".text is required");
    if (!in.text.empty()) in.text += "\n";
    in.text += **text;
  }
  if (auto r = take(decode_model(body), in.model); !r) return r.error();
  auto no_reply = get_bool(body, "noReply");
  if (!no_reply) return no_reply.error();
  in.no_reply = no_reply->value_or(false);
  if (auto r = take(get_string(body, "agent"), in.agent); !r) return r.error();
  auto tools = get_object(body, "tools");
  if (!tools) return tools.error();
  if (*tools)
    for (const auto& [k, v] : **tools) {
      if (!v.is_bool())
        return invalid(field_path("tools", k) + " must be a boolean, got " +
                       std::string(kind_name(v)));
      in.tools[std::string(k)] = v.get_bool();
    }
  return in;
}

namespace {

// A permission answer whose choice is the field `key` ("reply", or the V1 route's "response").
Result<PermissionReplyRequest> decode_permission_answer(const json::object& body,
                                                        std::string_view key) {
  PermissionReplyRequest out;
  auto reply = require_string(body, key);
  if (!reply) return reply.error();
  auto parsed = permission::parse_reply(*reply);
  if (!parsed)
    return invalid(std::string(key) + " must be \"once\", \"always\" or \"reject\", got " +
                   json::serialize(json::string(*reply)));
  out.reply = *parsed;
  if (auto r = take(get_string(body, "message"), out.message); !r) return r.error();
  if (auto r = take(optional_client_id(body), out.client_id); !r) return r.error();
  return out;
}

}  // namespace

Result<PermissionReplyRequest> decode_permission_reply(const json::object& body) {
  return decode_permission_answer(body, "reply");
}

Result<PermissionReplyRequest> decode_permission_response(const json::object& body) {
  return decode_permission_answer(body, "response");
}

Result<SessionUpdateRequest> decode_session_update(const json::object& body) {
  SessionUpdateRequest out;
  if (auto r = take(get_string(body, "title"), out.update.title); !r) return r.error();
  auto time = get_object(body, "time");
  if (!time) return time.error();
  if (*time) {
    if (auto a = (*time)->find("archived"); a != (*time)->end()) {
      if (a->value().is_null()) {
        out.update.archived = std::optional<std::int64_t>();
      } else {
        auto archived = get_int(**time, "archived", "time");
        if (!archived) return archived.error();
        out.update.archived = *archived;
      }
    }
  }
  if (auto it = body.find("permission"); it != body.end()) {
    if (auto r = take(permission::parse_rules(it->value(), "permission"), out.update.permission);
        !r)
      return r.error();
  }
  if (auto it = body.find("approved"); it != body.end()) {
    auto rules = permission::parse_rules(it->value(), "approved");
    if (!rules) return rules.error();
    // What "always" answers approved: allow rules only (a deny belongs in `permission`).
    for (std::size_t i = 0; i < rules->size(); ++i)
      if ((*rules)[i].action != permission::Action::Allow)
        return invalid("approved[" + std::to_string(i) + "].action must be \"allow\", got \"" +
                       std::string(permission::action_name((*rules)[i].action)) +
                       "\" (rules that ask or deny go in permission)");
    out.update.approved = std::move(*rules);
  }
  if (auto r = take(optional_client_id(body), out.client_id); !r) return r.error();
  return out;
}

Result<std::optional<std::string>> decode_fork(const json::object& body) {
  return get_string(body, "messageID");
}

Result<session::ShellInput> decode_shell(const json::object& body) {
  session::ShellInput out;
  if (auto r = take(require_string(body, "agent"), out.agent); !r) return r.error();
  if (auto r = take(require_string(body, "command"), out.command); !r) return r.error();
  if (out.command.empty()) return invalid("command must not be empty");
  if (auto r = take(decode_model(body), out.model); !r) return r.error();
  if (body.contains("messageID"))
    return invalid("messageID is not supported: the server names the messages it stores");
  return out;
}

Result<session::Part> decode_part_update(const json::object& body, const std::string& session_id,
                                         const std::string& message_id,
                                         const std::string& part_id) {
  for (auto [key, expected] : {std::pair{"id", &part_id}, std::pair{"sessionID", &session_id},
                               std::pair{"messageID", &message_id}}) {
    auto v = require_string(body, key);
    if (!v) return v.error();
    if (*v != *expected)
      return invalid(std::string(key) + " must be the path's " + *expected + ", got " + *v);
  }
  auto type = require_string(body, "type");
  if (!type) return type.error();
  for (auto known : {"text", "reasoning", "tool", "step-start", "step-finish"})
    if (*type == known) return session::part_from_json(body);
  return invalid("type \"" + *type +
                 "\" is not a part type of this server (text, reasoning, tool, step-start, "
                 "step-finish)");
}

Result<std::size_t> decode_message_limit(std::string_view text) {
  std::size_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    return invalid("limit must be a non-negative integer, got " +
                   json::serialize(json::string(text)));
  return n;
}

Result<QuestionReplyRequest> decode_question_reply(const json::object& body) {
  QuestionReplyRequest out;
  if (auto r = take(optional_client_id(body), out.client_id); !r) return r.error();
  auto answers = get_array(body, "answers");
  if (!answers) return answers.error();
  if (!*answers) return invalid("answers is required: one array of chosen labels per question");
  for (std::size_t i = 0; i < (*answers)->size(); ++i) {
    const auto& a = (**answers)[i];
    std::string at = "answers[" + std::to_string(i) + "]";
    if (!a.is_array())
      return invalid(at + " must be an array of strings, got " + std::string(kind_name(a)));
    std::vector<std::string> chosen;
    for (std::size_t j = 0; j < a.get_array().size(); ++j) {
      const auto& v = a.get_array()[j];
      if (!v.is_string())
        return invalid(at + "[" + std::to_string(j) + "] must be a string, got " +
                       std::string(kind_name(v)));
      chosen.emplace_back(v.get_string());
    }
    out.answers.push_back(std::move(chosen));
  }
  return out;
}

Result<std::optional<std::string>> decode_answerer(const json::object& body) {
  return optional_client_id(body);
}

Result<std::string> decode_message_id(std::string_view text, std::string_view where) {
  if (!text.starts_with("msg"))
    return invalid(std::string(where) + " must be a message id (\"msg…\"), got " +
                   json::serialize(json::string(text)));
  return std::string(text);
}

Result<RevertRequest> decode_revert(const json::object& body) {
  RevertRequest out;
  auto message_id = require_string(body, "messageID");
  if (!message_id) return message_id.error();
  if (auto r = take(decode_message_id(*message_id, "messageID"), out.message_id); !r)
    return r.error();
  auto part_id = get_string(body, "partID");
  if (!part_id) return part_id.error();
  if (*part_id) {
    if (!(*part_id)->starts_with("prt"))
      return invalid("partID must be a part id (\"prt…\"), got " +
                     json::serialize(json::string(**part_id)));
    out.part_id = std::move(**part_id);
  }
  return out;
}

Result<std::string> decode_login(const json::object& body) {
  return require_string(body, "password");
}

namespace {

// The app's tools: {NAME: {description?, inputSchema?, interactive?}}.
Result<std::vector<clienttool::ToolSpec>> decode_chat_tools(const json::object& tools) {
  std::vector<clienttool::ToolSpec> specs;
  for (const auto& [name, value] : tools) {
    std::string at = field_path("tools", name);
    if (!clienttool::valid_name(name))
      return invalid(at + ": a tool name must be 1-128 letters, digits, '_' or '-'");
    if (!value.is_object())
      return invalid(at + " must be an object, got " + std::string(kind_name(value)));
    const json::object& t = value.get_object();
    clienttool::ToolSpec spec;
    spec.name = std::string(name);
    if (auto r = clienttool::parse_spec_options(t, at, spec); !r) return r.error();
    auto schema = t.find("inputSchema");
    if (schema == t.end() || schema->value().is_null())
      spec.parameters = json::object{{"type", "object"}, {"properties", json::object{}}};
    else
      spec.parameters = json::value(schema->value(), json::storage_ptr());
    specs.push_back(std::move(spec));
  }
  return specs;
}

// A tool part of the last assistant message: its output or its approval answer, if it has one.
Result<void> decode_tool_part(const json::object& part, const std::string& at,
                              chat::ChatRequest& out) {
  auto call_id = require_string(part, "toolCallId", at);
  if (!call_id) return call_id.error();
  auto state = require_string(part, "state", at);
  if (!state) return state.error();
  if (*state == "output-available" || *state == "output-error") {
    chat::ToolOutput output;
    output.call_id = *call_id;
    output.ok = *state == "output-available";
    if (output.ok) {
      if (auto o = part.find("output"); o != part.end())
        output.output = json::value(o->value(), json::storage_ptr());
    } else {
      auto error = get_string(part, "errorText", at);
      if (!error) return error.error();
      output.error = error->value_or("the tool failed");
    }
    out.outputs.push_back(std::move(output));
  } else if (*state == "approval-responded") {
    auto approval = get_object(part, "approval", at);
    if (!approval) return approval.error();
    if (!*approval) return invalid(at + ".approval is required in state approval-responded");
    std::string where = at + ".approval";
    chat::ApprovalAnswer answer;
    answer.call_id = *call_id;
    if (auto r = take(require_string(**approval, "id", where), answer.approval_id); !r) return r;
    auto approved = get_bool(**approval, "approved", where);
    if (!approved) return approved.error();
    if (!*approved) return invalid(where + ".approved is required");
    answer.approved = **approved;
    if (auto r = take(get_string(**approval, "reason", where), answer.reason); !r) return r;
    out.approvals.push_back(std::move(answer));
  }
  return {};
}

}  // namespace

Result<chat::ChatRequest> decode_chat_request(const json::object& request,
                                              const json::object& body) {
  chat::ChatRequest out;
  if (auto r = take(require_string(request, "id"), out.chat_id); !r) return r.error();
  if (out.chat_id.size() > 256) return invalid("id must be at most 256 characters");
  // The same on both stores: PostgreSQL's TEXT cannot hold a NUL.
  if (out.chat_id.find('\0') != std::string::npos)
    return invalid("id must not contain a NUL character");
  auto trigger = get_string(request, "trigger");
  if (!trigger) return trigger.error();
  if (!*trigger || **trigger == "submit-message")
    out.trigger = chat::ChatRequest::Trigger::Submit;
  else if (**trigger == "regenerate-message")
    out.trigger = chat::ChatRequest::Trigger::Regenerate;
  else
    return invalid("trigger must be \"submit-message\" or \"regenerate-message\", got \"" +
                   **trigger + "\"");
  if (auto r = take(get_string(request, "messageId"), out.message_id); !r) return r.error();

  auto messages = get_array(request, "messages");
  if (!messages) return messages.error();
  if (!*messages) return invalid("messages is required (the chat's UI messages)");
  for (std::size_t i = 0; i < (*messages)->size(); ++i) {
    std::string at = "messages[" + std::to_string(i) + "]";
    const json::value& m = (**messages)[i];
    if (!m.is_object()) return invalid(at + " must be an object, got " + std::string(kind_name(m)));
    auto role = require_string(m.get_object(), "role", at);
    if (!role) return role.error();
    if (*role != "user" && *role != "assistant" && *role != "system")
      return invalid(at + ".role must be \"user\", \"assistant\" or \"system\", got \"" + *role +
                     "\"");
    auto parts = get_array(m.get_object(), "parts", at);
    if (!parts) return parts.error();
    if (!*parts) return invalid(at + ".parts is required");
    for (std::size_t k = 0; k < (*parts)->size(); ++k) {
      std::string part_at = at + ".parts[" + std::to_string(k) + "]";
      const json::value& p = (**parts)[k];
      if (!p.is_object())
        return invalid(part_at + " must be an object, got " + std::string(kind_name(p)));
      auto type = require_string(p.get_object(), "type", part_at);
      if (!type) return type.error();
      if (i + 1 != (*messages)->size()) continue;  // only the last message is read
      const json::object& part = p.get_object();
      if (*role == "user") {
        if (*type == "text") {
          auto text = require_string(part, "text", part_at);
          if (!text) return text.error();
          out.user_text = out.user_text.value_or("") + (out.user_text ? "\n" : "") + *text;
        } else if (*type == "file") {
          return invalid(part_at +
                         ": file parts are not supported; send the file's content as "
                         "text, or let a tool read it");
        }
      } else if (*role == "assistant" && (type->starts_with("tool-") || *type == "dynamic-tool")) {
        if (auto r = decode_tool_part(part, part_at, out); !r) return r.error();
      }
    }
    if (i + 1 == (*messages)->size() && *role == "user" && !out.user_text)
      return invalid(at + " has no text part");
  }
  if (out.trigger == chat::ChatRequest::Trigger::Submit &&
      ((*messages)->empty() || (*messages)->back().get_object().at("role").as_string() == "system"))
    return invalid(
        "messages must end with the user's message (or the assistant's, carrying tool "
        "outputs): nothing to answer");

  if (auto r = take(get_string(body, "model"), out.model); !r) return r.error();
  if (auto r = take(get_string(body, "agent"), out.agent); !r) return r.error();
  if (auto r = take(optional_client_id(body), out.client_id); !r) return r.error();
  auto resumable = get_bool(body, "resumable");
  if (!resumable) return resumable.error();
  out.resumable = resumable->value_or(false);
  auto tools = get_object(body, "tools");
  if (!tools) return tools.error();
  if (*tools) {
    auto specs = decode_chat_tools(**tools);
    if (!specs) return specs.error();
    out.tools = std::move(*specs);
  }
  return out;
}

namespace {

// {providerID, modelID} at the top of a body: both or neither.
Result<std::optional<std::string>> decode_model_ids(const json::object& body) {
  std::optional<std::string> provider, model;
  if (auto r = take(get_string(body, "providerID"), provider); !r) return r.error();
  if (auto r = take(get_string(body, "modelID"), model); !r) return r.error();
  if (provider.has_value() != model.has_value())
    return invalid(
        "providerID and modelID go together: send both, or neither for the default "
        "model");
  if (!provider) return std::optional<std::string>();
  return std::optional<std::string>(*provider + "/" + *model);
}

}  // namespace

Result<SummarizeRequest> decode_summarize(const json::object& body) {
  SummarizeRequest out;
  if (auto r = take(decode_model_ids(body), out.model); !r) return r.error();
  auto automatic = get_bool(body, "auto");
  if (!automatic) return automatic.error();
  out.auto_continue = automatic->value_or(false);
  return out;
}

Result<std::optional<std::string>> decode_init(const json::object& body) {
  auto message_id = get_string(body, "messageID");
  if (!message_id) return message_id.error();
  if (*message_id)
    if (auto r = decode_message_id(**message_id, "messageID"); !r) return r.error();
  return decode_model_ids(body);
}

Result<CommandRequest> decode_command(const json::object& body) {
  CommandRequest out;
  if (auto r = take(require_string(body, "command"), out.command); !r) return r.error();
  auto arguments = get_string(body, "arguments");
  if (!arguments) return arguments.error();
  out.arguments = arguments->value_or("");
  if (auto r = take(get_string(body, "agent"), out.agent); !r) return r.error();
  if (auto r = take(get_string(body, "model"), out.model); !r) return r.error();
  if (body.contains("messageID"))
    return invalid("messageID is not supported: the server names the messages it stores");
  auto parts = get_array(body, "parts");
  if (!parts) return parts.error();
  if (*parts && !(*parts)->empty())
    return invalid("parts (files) are not supported with a command: send them with a prompt");
  return out;
}

}  // namespace sb::server
