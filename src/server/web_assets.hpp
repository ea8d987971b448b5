#pragma once
// The web page's files, embedded in the binary at build time (cmake/embed_web_assets.cmake turns
// web/dist into a generated source), so that `switchboard serve` needs no files beside it.
#include <span>
#include <string_view>

namespace sb::server {

// One built file. Immutable, static storage; safe from any thread.
struct WebAsset {
  std::string_view path;          // "/index.html", "/assets/index-1a2b3c.js"
  std::string_view content_type;  // "text/javascript; charset=utf-8"
  std::string_view etag;          // quoted, from the file's SHA-256
  std::string_view body;
  std::string_view gzip;  // the body gzipped, for text; empty when not smaller or not text
};

// Every embedded file; empty in a server built with SWITCHBOARD_WEB=OFF.
std::span<const WebAsset> web_assets();

}  // namespace sb::server
