#pragma once
// ClientCredentials: the token each clientID gets on its first use (a registration, a request
// stream, a WebSocket, a session created for it). Later uses of that clientID must present it,
// so that one client can never register under, listen as or answer for another. Only a SHA-256
// hash of each token is stored (SQLite, so tokens survive a restart; a copy of the database does
// not reveal them).
//
// Thread-safe: every function may be called from any thread (each holds the database's mutex,
// which also guards the cache). The event loop calls them through run() and post(), which on
// PostgreSQL run them on a thread of the credentials' own (store::Worker).
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "store/worker.hpp"
#include "util/error.hpp"

namespace sb::store {
class Database;
}

namespace sb::clienttool {

class ClientCredentials {
 public:
  // Creates the credentials table in `db` when needed (the server shares its store's database).
  static Result<std::shared_ptr<ClientCredentials>> open(std::shared_ptr<store::Database> db);
  // An in-memory store, for tests.
  static Result<std::shared_ptr<ClientCredentials>> open_memory();
  ~ClientCredentials();

  // Checks `token` for `client_id`. On the client's first use a new token is issued and
  // returned (the caller hands it to the client; it is never shown again). Unauthorized when
  // the client has a token and `token` is missing or wrong.
  Result<std::optional<std::string>> authenticate(const std::string& client_id,
                                                  const std::optional<std::string>& token);
  // Like authenticate(), but a client that has no token yet stays without one: for answers
  // (results, progress, unregister) that cannot be a client's first use.
  Result<void> verify(const std::string& client_id, const std::optional<std::string>& token);
  // Withdraws a token that authenticate() just issued when the request it came with failed, so
  // that the client is not locked out of an id whose token it never saw.
  void withdraw(const std::string& client_id);

  bool has_token(const std::string& client_id);

  // From the event loop: `co_await credentials.run(std::move(job))` with a named lambda `job`
  // (see SessionStore::run) taking a ClientCredentials&, `f`
  // owning what it uses.
  template <class F>
  boost::asio::awaitable<std::invoke_result_t<F&, ClientCredentials&>> run(F f) {
    // Named: see SessionStore::run (GCC 12 and a lambda inside co_await).
    auto job = [this, f = std::move(f)]() mutable { return f(*this); };
    co_return co_await worker_->run(std::move(job));
  }
  // After the calls made before it; nobody waits (a withdrawal).
  template <class F>
  void post(F f) {
    worker_->post([this, f = std::move(f)]() mutable { f(*this); });
  }

 private:
  explicit ClientCredentials(std::shared_ptr<store::Database> db);
  // The stored hash, from the cache or the database; "" when the client has none.
  Result<std::string> stored_hash_locked(const std::string& client_id);

  std::shared_ptr<store::Database> db_;
  std::unordered_map<std::string, std::string> cache_;  // client id -> hex SHA-256 of its token
  // Last: destroyed first, so that the call it may be running finds the rest.
  std::unique_ptr<store::Worker> worker_;
};

// Hex SHA-256 of `text` (also used for the server password's cookie).
std::string sha256_hex(std::string_view text);
// Compares two strings in time that depends only on their lengths.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace sb::clienttool
