#pragma once
// Path arguments of tools: resolved against the project directory, and confined to it unless
// the `external_directory` permission allows going outside.
#include <boost/asio/awaitable.hpp>

#include <filesystem>
#include <string_view>

#include "tool/tool.hpp"

namespace sb::tool {

// True when `path` (made absolute and free of symlinks and "..") lies inside `root` (made so
// too). A path written under `root` with no symlink below it costs an lstat per part below the
// root; anything else is resolved in full.
bool is_within(const std::filesystem::path& root, const std::filesystem::path& path);

// Resolves `given` (absolute, or relative to ctx.directory). A path outside the project asks the
// `external_directory` permission with the pattern "<its directory>/*"; a denial is an error the
// model reads. The result is absolute and lexically normal; it need not exist.
boost::asio::awaitable<Result<std::filesystem::path>> resolve_path(ToolContext& ctx,
                                                                   std::string_view given);

}  // namespace sb::tool
