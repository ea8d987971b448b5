// Which model providers a configuration describes (see docs/configuration.md, "Models").
#include <algorithm>
#include <fstream>
#include <sstream>

#include "config/config.hpp"
#include "provider/provider.hpp"

namespace sb::provider {
namespace {

Error bad(const std::string& key, const std::string& what) {
  return make_error(ErrorCode::InvalidRequest, key + " " + what);
}

Result<std::vector<std::string>> string_list(const json::object& o, std::string_view key,
                                             const std::string& prefix) {
  std::vector<std::string> out;
  auto arr = get_array(o, key, prefix);
  if (!arr) return arr.error();
  if (!*arr) return out;
  for (const auto& v : **arr) {
    if (!v.is_string()) return bad(field_path(prefix, key), "must be an array of strings");
    out.emplace_back(v.get_string());
  }
  return out;
}

// provider.NAME.input: ["text", "image", "pdf"] (text is always taken); absent: `fallback`.
Result<InputKinds> input_kinds(const json::object& p, const std::string& prefix,
                               InputKinds fallback) {
  auto it = p.find("input");
  if (it == p.end()) return fallback;
  std::string key = prefix + ".input";
  if (!it->value().is_array())
    return bad(key, "must be an array of \"text\", \"image\" and \"pdf\"");
  InputKinds kinds{false, false};
  for (const auto& v : it->value().get_array()) {
    std::string_view kind = v.is_string() ? std::string_view(v.get_string()) : std::string_view();
    if (kind == "image")
      kinds.image = true;
    else if (kind == "pdf")
      kinds.pdf = true;
    else if (kind != "text")
      return bad(key, "must hold only \"text\", \"image\" and \"pdf\", got " + json::serialize(v));
  }
  return kinds;
}

}  // namespace

InputKinds default_input(std::string_view type, std::string_view base_url) {
  if (type == "openai-compatible")
    return InputKinds{true, base_url.find("://api.openai.com") != std::string_view::npos};
  return InputKinds{};
}

Result<ProviderSet> load_providers(const json::object& config,
                                   const std::function<std::string(const std::string&)>& env) {
  ProviderSet set;
  std::string first_http_model;
  std::string first_scripted_model;  // a configured scripted provider's, when no other is set

  auto section = get_object(config, "provider");
  if (!section) return section.error();
  if (*section) {
    for (const auto& [name_sv, value] : **section) {
      std::string name(name_sv);
      std::string prefix = "provider." + name;
      if (!value.is_object()) return bad(prefix, "must be an object");
      const auto& p = value.get_object();
      auto type = get_string(p, "type", prefix);
      if (!type) return type.error();
      std::string t = type->value_or("openai-compatible");
      auto models = string_list(p, "models", prefix);
      if (!models) return models.error();

      if (t != "scripted" && t != "openai-compatible" && t != "anthropic")
        return bad(
            prefix + ".type",
            "must be \"openai-compatible\", \"anthropic\" or \"scripted\", got \"" + t + "\"");
      auto base = get_string(p, "baseURL", prefix);
      if (!base) return base.error();
      auto input = input_kinds(p, prefix, default_input(t, base->value_or("")));
      if (!input) return input.error();

      if (t == "scripted") {
        json::array script;
        if (auto it = p.find("script"); it != p.end()) {
          if (!it->value().is_array()) return bad(prefix + ".script", "must be an array of steps");
          script = it->value().get_array();
        }
        auto file = get_string(p, "scriptFile", prefix);
        if (!file) return file.error();
        if (*file) {
          std::ifstream in(**file);
          if (!in) return bad(prefix + ".scriptFile", "cannot read " + **file);
          std::ostringstream text;
          text << in.rdbuf();
          auto doc = parse_json(text.str());
          if (!doc) return bad(prefix + ".scriptFile", **file + ": " + doc.error().message);
          if (!doc->is_array())
            return bad(prefix + ".scriptFile", **file + " must hold an array of steps");
          script = doc->get_array();
        }
        set.providers[name] = make_scripted_provider(name, std::move(script), *input);
        set.notes.push_back("provider " + name + ": scripted model");
        if (first_scripted_model.empty()) first_scripted_model = name + "/default";
        continue;
      }
      HttpProviderOptions o;
      o.id = name;
      o.type = t;
      o.models = std::move(*models);
      if (*base)
        o.base_url = **base;
      else if (t == "anthropic")
        o.base_url = "https://api.anthropic.com/v1";
      else if (name == "openai")
        o.base_url = "https://api.openai.com/v1";
      else
        return bad(prefix + ".baseURL", "is required for an openai-compatible provider");
      // Without a baseURL the default URL decides (provider "openai": OpenAI's own).
      o.input = p.contains("input") ? *input : default_input(t, o.base_url);
      auto key = get_string(p, "apiKey", prefix);
      if (!key) return key.error();
      auto key_env = get_string(p, "apiKeyEnv", prefix);
      if (!key_env) return key_env.error();
      if (*key) {
        o.api_key = **key;
      } else if (*key_env) {
        o.api_key = env(**key_env);
        if (o.api_key.empty()) {
          o.missing_key = prefix + ".apiKeyEnv names " + **key_env + ", which is not set";
          set.warnings.push_back("provider " + name + ": " + o.missing_key +
                                 " (or is empty): its requests go without a key");
        }
      }
      auto headers = get_object(p, "headers", prefix);
      if (!headers) return headers.error();
      if (*headers)
        for (const auto& [k, v] : **headers) {
          if (!v.is_string()) return bad(prefix + ".headers." + std::string(k), "must be a string");
          o.headers[std::string(k)] = std::string(v.get_string());
        }
      if (first_http_model.empty() && !o.models.empty())
        first_http_model = name + "/" + o.models.front();
      // The log shows where, never credentials in the URL's userinfo or query.
      set.notes.push_back("provider " + name + ": " + t + " at " + config::redact_url(o.base_url));
      set.providers[name] = make_http_provider(std::move(o));
    }
  }

  // The usual environment variables work without a config file.
  if (!set.providers.count("openai") && !env("OPENAI_API_KEY").empty()) {
    HttpProviderOptions o{
        "openai", "openai-compatible", env("OPENAI_BASE_URL"), env("OPENAI_API_KEY"), {}, {}};
    if (o.base_url.empty()) o.base_url = "https://api.openai.com/v1";
    o.input = default_input(o.type, o.base_url);
    std::string model = env("OPENAI_MODEL").empty() ? "gpt-4o-mini" : env("OPENAI_MODEL");
    o.models = {model};
    if (first_http_model.empty()) first_http_model = "openai/" + model;
    set.notes.push_back("provider openai: from OPENAI_API_KEY at " + o.base_url);
    set.providers["openai"] = make_http_provider(std::move(o));
  }
  if (!set.providers.count("anthropic") && !env("ANTHROPIC_API_KEY").empty()) {
    HttpProviderOptions o{
        "anthropic", "anthropic", env("ANTHROPIC_BASE_URL"), env("ANTHROPIC_API_KEY"), {}, {}};
    if (o.base_url.empty()) o.base_url = "https://api.anthropic.com/v1";
    o.input = default_input(o.type, o.base_url);
    std::string model =
        env("ANTHROPIC_MODEL").empty() ? "claude-sonnet-4-5" : env("ANTHROPIC_MODEL");
    o.models = {model};
    if (first_http_model.empty()) first_http_model = "anthropic/" + model;
    set.notes.push_back("provider anthropic: from ANTHROPIC_API_KEY");
    set.providers["anthropic"] = make_http_provider(std::move(o));
  }
  if (!set.providers.count("scripted"))
    set.providers["scripted"] = make_scripted_provider("scripted", {});

  auto model = get_string(config, "model");
  if (!model) return model.error();
  if (*model) {
    auto slash = (*model)->find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == (*model)->size())
      return bad("model", "must be \"PROVIDER/MODEL\", got \"" + **model + "\"");
    if (!set.providers.count((*model)->substr(0, slash)))
      return bad("model",
                 "names provider \"" + (*model)->substr(0, slash) + "\", which is not configured");
    set.default_model = **model;
    std::string listed_by = (*model)->substr(0, slash);
    std::string model_name = (*model)->substr(slash + 1);
    const auto& provider = set.providers.at(listed_by);
    auto listed = provider->models();
    if (provider->type() != "scripted" && !listed.empty() &&
        std::find(listed.begin(), listed.end(), model_name) == listed.end())
      set.warnings.push_back("model \"" + **model + "\" is not in provider." + listed_by +
                             ".models; it is requested as written");
  } else if (!first_http_model.empty()) {
    set.default_model = first_http_model;
  } else if (!first_scripted_model.empty()) {
    // Only scripted providers configured: the first of them, not the built-in echo.
    set.default_model = first_scripted_model;
  } else {
    set.default_model = "scripted/default";
    set.notes.push_back(
        "no model provider is configured: using the scripted model (it echoes, and \"/call TOOL "
        "{json}\" calls a tool)");
  }
  return set;
}

}  // namespace sb::provider
