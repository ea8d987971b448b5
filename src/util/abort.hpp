#pragma once
// AbortSignal: "stop what you are doing", shared by everything working on one tool call or turn.
// Callbacks registered with on_abort run once, on the thread that calls abort() (or at once when
// the signal has already fired). Thread-safe.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace sb {

class AbortSignal {
 public:
  static std::shared_ptr<AbortSignal> create() { return std::make_shared<AbortSignal>(); }

  bool aborted() const {
    std::lock_guard lock(mutex_);
    return aborted_;
  }
  std::string reason() const {
    std::lock_guard lock(mutex_);
    return reason_;
  }

  // Fires the signal; later calls do nothing.
  void abort(std::string reason) {
    std::map<std::uint64_t, std::function<void()>> callbacks;
    {
      std::lock_guard lock(mutex_);
      if (aborted_) return;
      aborted_ = true;
      reason_ = std::move(reason);
      callbacks.swap(callbacks_);
    }
    for (auto& [id, cb] : callbacks)
      cb();
  }

  // Returns an id for remove(); 0 when the callback already ran because the signal had fired.
  std::uint64_t on_abort(std::function<void()> callback) {
    {
      std::lock_guard lock(mutex_);
      if (!aborted_) {
        std::uint64_t id = ++next_id_;
        callbacks_.emplace(id, std::move(callback));
        return id;
      }
    }
    callback();
    return 0;
  }

  void remove(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    callbacks_.erase(id);
  }

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
  mutable std::mutex mutex_;
  bool aborted_ = false;
  std::string reason_;
  std::uint64_t next_id_ = 0;
  std::map<std::uint64_t, std::function<void()>> callbacks_;
};

}  // namespace sb
