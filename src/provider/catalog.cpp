#include "provider/catalog.hpp"

#include <algorithm>

#include "config/config.hpp"

namespace sb::provider {
namespace {

json::object modalities(bool image, bool pdf) {
  return json::object{
      {"text", true}, {"audio", false}, {"image", image}, {"video", false}, {"pdf", pdf}};
}

// The AI SDK package that speaks the provider's wire format, as OpenCode names it (api.npm);
// none for the scripted model.
std::string_view npm_of(std::string_view type) {
  if (type == "openai-compatible") return "@ai-sdk/openai-compatible";
  if (type == "anthropic") return "@ai-sdk/anthropic";
  return "";
}

json::object model_json(const ModelProvider& p, const std::string& model) {
  InputKinds input = p.input();
  bool http = p.type() != "scripted";
  return json::object{
      {"id", model},
      {"providerID", p.id()},
      {"api",
       json::object{
           {"id", model}, {"url", config::redact_url(p.base_url())}, {"npm", npm_of(p.type())}}},
      {"name", model},
      {"capabilities", json::object{{"temperature", http},
                                    {"reasoning", false},
                                    {"attachment", input.image || input.pdf},
                                    {"toolcall", true},
                                    {"input", modalities(input.image, input.pdf)},
                                    {"output", modalities(false, false)},
                                    {"interleaved", false}}},
      // Switchboard knows no prices or context sizes: zero is OpenCode's "unknown".
      {"cost",
       json::object{
           {"input", 0}, {"output", 0}, {"cache", json::object{{"read", 0}, {"write", 0}}}}},
      {"limit", json::object{{"context", 0}, {"output", 0}}},
      {"status", "active"},
      {"options", json::object{}},
      {"headers", json::object{}},
      {"release_date", ""},
      {"variants", json::object{}},
  };
}

// The models a client may pick: the provider's list, and the default model when the config
// names one the list lacks (it is requested as written).
std::vector<std::string> models_of(const ProviderSet& set, const ModelProvider& p) {
  auto models = p.models();
  auto slash = set.default_model.find('/');
  if (slash != std::string::npos && set.default_model.substr(0, slash) == p.id()) {
    std::string model = set.default_model.substr(slash + 1);
    if (std::find(models.begin(), models.end(), model) == models.end()) models.push_back(model);
  }
  return models;
}

// {providerID: modelID}: each provider's default model, the configured default for its
// provider, else the provider's first.
json::object defaults_json(const ProviderSet& set) {
  json::object out;
  auto slash = set.default_model.find('/');
  for (const auto& [id, p] : set.providers) {
    auto models = models_of(set, *p);
    if (slash != std::string::npos && set.default_model.substr(0, slash) == id)
      out[id] = set.default_model.substr(slash + 1);
    else if (!models.empty())
      out[id] = models.front();
  }
  return out;
}

}  // namespace

json::object provider_json(const ProviderSet& set, const ModelProvider& p,
                           const json::object& config) {
  // Where it came from, in OpenCode's words: the config file, the environment (OPENAI_API_KEY,
  // ANTHROPIC_API_KEY), or built in (the scripted model).
  const json::object* section = object_at(config, "provider");
  const json::object* entry = section ? object_at(*section, p.id()) : nullptr;
  std::string source = "custom";
  json::array env;
  if (entry) {
    source = "config";
    if (auto name = string_or(*entry, "apiKeyEnv"); !name.empty()) env.emplace_back(name);
  } else if (p.type() != "scripted") {
    source = "env";
    env.emplace_back(p.type() == "anthropic" ? "ANTHROPIC_API_KEY" : "OPENAI_API_KEY");
  }
  json::object options;
  if (!p.base_url().empty()) options["baseURL"] = config::redact_url(p.base_url());
  json::object models;
  for (const auto& m : models_of(set, p))
    models[m] = model_json(p, m);
  return json::object{{"id", p.id()},          {"name", p.id()},     {"source", source},
                      {"env", std::move(env)}, {"options", options}, {"models", std::move(models)}};
}

json::object config_providers_json(const ProviderSet& set, const json::object& config) {
  json::array providers;
  for (const auto& [id, p] : set.providers)
    providers.push_back(provider_json(set, *p, config));
  return json::object{{"providers", std::move(providers)}, {"default", defaults_json(set)}};
}

json::object provider_list_json(const ProviderSet& set, const json::object& config) {
  // Every configured provider is usable: all of them are connected.
  json::array all, connected;
  for (const auto& [id, p] : set.providers) {
    all.push_back(provider_json(set, *p, config));
    connected.emplace_back(id);
  }
  return json::object{{"all", std::move(all)},
                      {"default", defaults_json(set)},
                      {"connected", std::move(connected)}};
}

}  // namespace sb::provider
