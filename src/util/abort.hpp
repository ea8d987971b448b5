#pragma once
// AbortSignal: "stop what you are doing", shared by everything working on one tool call or turn.
// Callbacks registered with on_abort run once, inside the abort() that fires the signal (or at
// once when the signal has already fired).
//
// Not thread-safe: used on the server's executor (one thread) only, like the rest of the core
// (docs/development.md, "Threading model"). A callback may call on_abort, remove or abort on the
// signal that runs it: abort() takes the callbacks out before it runs them, so a callback added
// then runs at once and a remove() then does not stop one that is still to run.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace sb {

class AbortSignal {
 public:
  static std::shared_ptr<AbortSignal> create() { return std::make_shared<AbortSignal>(); }

  bool aborted() const { return aborted_; }
  std::string reason() const { return reason_; }

  // Fires the signal; later calls do nothing.
  void abort(std::string reason) {
    if (aborted_) return;
    aborted_ = true;
    reason_ = std::move(reason);
    // Run from a local map: a callback may add or remove callbacks, or drop the last reference
    // to this signal.
    std::map<std::uint64_t, std::function<void()>> callbacks;
    callbacks.swap(callbacks_);
    for (auto& [id, cb] : callbacks)
      cb();
  }

  // Returns an id for remove(); 0 when the callback already ran because the signal had fired.
  std::uint64_t on_abort(std::function<void()> callback) {
    if (aborted_) {
      callback();
      return 0;
    }
    std::uint64_t id = ++next_id_;
    callbacks_.emplace(id, std::move(callback));
    return id;
  }

  void remove(std::uint64_t id) { callbacks_.erase(id); }

  // Removes its callback when it goes out of scope.
  class Registration {
   public:
    Registration(std::shared_ptr<AbortSignal> signal, std::function<void()> callback)
        : signal_(std::move(signal)), id_(signal_ ? signal_->on_abort(std::move(callback)) : 0) {}
    ~Registration() {
      if (signal_ && id_) signal_->remove(id_);
    }
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;

   private:
    std::shared_ptr<AbortSignal> signal_;
    std::uint64_t id_;
  };

 private:
  bool aborted_ = false;
  std::string reason_;
  std::uint64_t next_id_ = 0;
  std::map<std::uint64_t, std::function<void()>> callbacks_;
};

}  // namespace sb
