#pragma once
// GET /doc: the OpenAPI 3.1 document of every route, built from the route table (each Route's
// RouteDoc, route.hpp) and the schemas in src/server/api/*.json; and the check that holds the
// routes to it. Internal to src/server.
#include <optional>
#include <string>
#include <vector>

#include "server/route.hpp"

namespace sb::server {

// The document, built on first use.
const json::object& api_document();
const std::string& api_document_text();

// What is wrong with the document: a schema or parameter named twice or named by a route (or a
// $ref) and not defined, an operationId used twice, a route without id or summary. Empty when
// it is whole; the unit tests hold it so.
std::vector<std::string> api_document_problems();

// With $SWITCHBOARD_CHECK_API_DOC=1 (server.checkApiDoc; the test command sets it) every answer
// a route gives is checked against its documentation: a success answer against the route's
// answer schema and the body it accepted against its body schema, any other status against the
// documented ones and an error's body against Error. A mismatch comes back as a 500 that names
// it (and is logged), so any test that meets one fails.
std::optional<Response> check_exchange(const Route& route, const Request& req, const Response& res);

// Under the same check, for a stream: each `data:` of an SSE frame (one event or several, a
// replay) against the schema `name`; a mismatch is logged as "API doc check: ..." (the tests fail
// on it: the stream itself goes on). `where` names the stream in the message.
void check_stream_frame(std::string_view where, std::string_view name, std::string_view frame);

}  // namespace sb::server
