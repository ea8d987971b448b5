#pragma once
// ModelProvider: one step of a conversation with a language model, streamed as events.
// Implementations: OpenAI-compatible and Anthropic over HTTP(S), and the scripted model.
#include <boost/asio/awaitable.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "provider/types.hpp"
#include "util/abort.hpp"

namespace sb::provider {

using EventHandler = std::function<void(StreamEvent)>;

class ModelProvider {
 public:
  virtual ~ModelProvider() = default;
  virtual const std::string& id() const = 0;
  virtual std::string type() const = 0;  // "openai-compatible" | "anthropic" | "scripted"
  // Where its requests go ("https://api.openai.com/v1"); empty for the scripted model.
  virtual std::string base_url() const { return {}; }
  virtual std::vector<std::string> models() const = 0;
  // What its models take besides text (provider.NAME.input).
  virtual InputKinds input() const { return {}; }
  // Streams one step. Delivers every event to `on_event` and ends with exactly one terminal
  // event (StepFinish or StreamError); an abort ends it with StreamError("aborted"). The caller
  // keeps `request` alive until the stream ends.
  virtual boost::asio::awaitable<void> stream(const ModelRequest& request, EventHandler on_event,
                                              std::shared_ptr<AbortSignal> abort) = 0;
};

using ProviderPtr = std::shared_ptr<ModelProvider>;

// Settings of an HTTP provider, from the config file or the environment.
struct HttpProviderOptions {
  std::string id;
  std::string type;  // "openai-compatible" | "anthropic"
  std::string base_url;
  std::string api_key;
  std::vector<std::string> models;
  std::map<std::string, std::string> headers;  // extra request headers
  InputKinds input;                            // provider.NAME.input; see default_input()
  // Why api_key is empty when the config meant to give one ("provider.local.apiKeyEnv names
  // LOCAL_KEY, which is not set"): an authentication error of the model server says it.
  std::string missing_key;
};

ProviderPtr make_http_provider(HttpProviderOptions options);

// What a provider's models take when provider.NAME.input does not say: Anthropic's images and
// PDFs; images for an OpenAI-compatible server, and PDFs too for OpenAI's own (`base_url` at
// api.openai.com); everything for the scripted model.
InputKinds default_input(std::string_view type, std::string_view base_url);

// The scripted model (see docs/providers.md): replays `script` (a JSON array of steps), or with
// no script, the built-in echo behaviour.
ProviderPtr make_scripted_provider(std::string id, json::array script, InputKinds input = {});

// The providers a configuration describes, and the default model "provider/model".
struct ProviderSet {
  std::map<std::string, ProviderPtr> providers;
  std::string default_model;          // "NAME/MODEL"
  std::vector<std::string> notes;     // what was configured, for the start-up log
  std::vector<std::string> warnings;  // what looks wrong but does not stop start-up
};

// Reads `provider` and `model` from the merged config document, plus OPENAI_API_KEY /
// OPENAI_BASE_URL / ANTHROPIC_API_KEY from `env`. With nothing configured the scripted model is
// the default. Errors name the key.
Result<ProviderSet> load_providers(const json::object& config,
                                   const std::function<std::string(const std::string&)>& env);

}  // namespace sb::provider
