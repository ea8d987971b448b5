#pragma once
// The `webfetch` tool (OpenCode's): fetches an http(s) URL and gives the model its content as
// markdown (default), plain text or the raw HTML. Asks the `webfetch` permission with the URL.
// Follows up to 5 redirects; a response over 5 MiB, a status outside 2xx, a timeout (default 30 s,
// at most 120 s, for the whole exchange) and binary content are errors the model can read.
// Images come back as an attachment (a data: URL) instead. The title is "<url> (<content type>)".
#include <chrono>
#include <cstddef>
#include <string>

#include "tool/tool.hpp"

namespace sb::tool {

struct WebFetchOptions {
  std::chrono::milliseconds default_timeout{30000};  // when the call gives none
  std::chrono::milliseconds max_timeout{120000};     // a larger `timeout` is lowered to this
  std::size_t max_response_bytes = 5 * 1024 * 1024;  // 5 MiB of body, after de-chunking
  int max_redirects = 5;
};

ToolPtr make_webfetch_tool(WebFetchOptions options = {});

// Content-Type parsed: the media type lowercased without parameters ("text/html"), and the
// charset parameter ("" when absent).
struct MediaType {
  std::string type;
  std::string charset;
};
MediaType parse_media_type(std::string_view content_type);

}  // namespace sb::tool
