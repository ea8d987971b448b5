#pragma once
// The project a directory belongs to, as OpenCode names it: sessions carry its id (projectID),
// and GET /project/current and GET /path answer with it.
//
// Use: `ProjectInfo p = project_of(directory);` once per directory (it runs `git`, a few
// milliseconds; the caller keeps the answer). Thread-safe (no shared state), but blocking: call it
// at start-up or off the event loop.
#include <string>

namespace sb::session {

struct ProjectInfo {
  // "global" outside a git repository (and in one without commits); inside one, the id of its
  // root commit (the smallest, when the history has several), or what the repository's
  // `opencode` file (in its git directory, where OpenCode keeps the id it chose) says.
  std::string id;
  // The repository's top directory (its work tree); "/" outside a repository.
  std::string worktree;
  // "git" inside a repository; empty outside one.
  std::string vcs;
};

ProjectInfo project_of(const std::string& directory);

// A short readable name for a session ("quiet-river"), made from its id: the same id always
// gives the same name. OpenCode shows it beside the title.
std::string slug_of(const std::string& session_id);

}  // namespace sb::session
