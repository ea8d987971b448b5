#pragma once
// The configured providers as OpenCode's clients read them (GET /provider, GET /config/providers):
// OpenCode's Provider and Model objects, filled from what Switchboard knows of each provider (its
// wire format, base URL, models and what they take). What it does not know is left at OpenCode's
// "unknown": zero prices and limits, an empty release date. No API key is ever in them, and the
// base URL is shown without its userinfo and query values (config::redact_url). Pure
// functions; thread-safe.
#include <string>

#include "provider/provider.hpp"

namespace sb::provider {

// The OpenCode answers of the two routes.
// GET /provider: {all: [Provider], default: {providerID: modelID}, connected: [providerID]}.
json::object provider_list_json(const ProviderSet& set, const json::object& config);
// GET /config/providers: {providers: [Provider], default: {providerID: modelID}}.
json::object config_providers_json(const ProviderSet& set, const json::object& config);

// One Provider: {id, name, source, env, options, models: {ID: Model}}. `config`: the merged
// config document (whether the provider came from it, and the variable its key is read from).
json::object provider_json(const ProviderSet& set, const ModelProvider& provider,
                           const json::object& config);

}  // namespace sb::provider
