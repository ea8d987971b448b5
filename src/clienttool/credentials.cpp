#include "clienttool/credentials.hpp"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <chrono>

#include "store/sqlite.hpp"
#include "util/clock.hpp"

namespace sb::clienttool {

namespace {

std::string hex(const unsigned char* data, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(digits[data[i] >> 4]);
    out.push_back(digits[data[i] & 0xf]);
  }
  return out;
}

Result<std::string> new_token() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1)
    return make_error(ErrorCode::Internal, "no random bytes for a client token");
  return "sbct_" + hex(bytes, sizeof bytes);
}

Error unauthorized(const std::string& client_id, bool presented) {
  return make_error(
      ErrorCode::Unauthorized,
      presented ? "wrong client token for client \"" + client_id + "\""
                : "client \"" + client_id +
                      "\" has a client token: send it in the X-Switchboard-Client-Token header "
                      "(or the clientToken query parameter of a stream or WebSocket)");
}

}  // namespace

std::string sha256_hex(std::string_view text) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  return hex(digest, sizeof digest);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

ClientCredentials::ClientCredentials(std::shared_ptr<store::Database> db)
    : db_(std::move(db)),
      worker_(std::make_unique<store::Worker>(db_->engine() == store::Engine::Postgres)) {}
ClientCredentials::~ClientCredentials() = default;

Result<std::shared_ptr<ClientCredentials>> ClientCredentials::open(
    std::shared_ptr<store::Database> db) {
  {
    std::lock_guard lock(db->mutex());
    // Nodes of a cluster may start at once on a new store (store::Database::lock_until_commit).
    store::Database::Transaction tx(*db);
    if (!tx.begun()) return tx.begun().error();
    if (auto locked = db->lock_until_commit("schema"); !locked) return locked.error();
    auto r = db->exec(db->engine() == store::Engine::Postgres
                          ? "CREATE TABLE IF NOT EXISTS client_credential (client_id TEXT COLLATE "
                            "\"C\" PRIMARY KEY, token_hash TEXT NOT NULL, created BIGINT NOT NULL)"
                          : "CREATE TABLE IF NOT EXISTS client_credential ("
                            " client_id TEXT PRIMARY KEY, token_hash TEXT NOT NULL, created "
                            "INTEGER NOT NULL)");
    if (!r) return r.error();
    if (auto committed = tx.commit(); !committed) return committed.error();
  }
  return std::shared_ptr<ClientCredentials>(new ClientCredentials(std::move(db)));
}

Result<std::shared_ptr<ClientCredentials>> ClientCredentials::open_memory() {
  auto db = store::SqliteDatabase::open_memory();
  if (!db) return db.error();
  return open(std::move(*db));
}

Result<std::string> ClientCredentials::stored_hash_locked(const std::string& client_id) {
  if (auto it = cache_.find(client_id); it != cache_.end()) return it->second;
  auto st = db_->prepare("SELECT token_hash FROM client_credential WHERE client_id = ?");
  if (!st) return st.error();
  st->bind(1, client_id);
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return std::string();
  std::string hash = st->text(0);
  cache_[client_id] = hash;
  return hash;
}

Result<std::optional<std::string>> ClientCredentials::authenticate(
    const std::string& client_id, const std::optional<std::string>& token) {
  std::lock_guard lock(db_->mutex());
  auto stored = stored_hash_locked(client_id);
  if (!stored) return stored.error();
  if (!stored->empty()) {
    if (!token || !constant_time_equal(sha256_hex(*token), *stored))
      return unauthorized(client_id, token.has_value());
    return std::optional<std::string>();
  }
  // First use. A token presented for an id that has none is ignored: the client gets a new one.
  auto issued = new_token();
  if (!issued) return issued.error();
  std::string hash = sha256_hex(*issued);
  auto st = db_->prepare(
      "INSERT INTO client_credential (client_id, token_hash, created) VALUES (?, ?, ?)");
  if (!st) return st.error();
  st->bind(1, client_id).bind(2, hash).bind(3, now_ms());
  if (auto r = st->run(); !r) return r.error();
  cache_[client_id] = hash;
  return std::optional<std::string>(std::move(*issued));
}

Result<void> ClientCredentials::verify(const std::string& client_id,
                                       const std::optional<std::string>& token) {
  std::lock_guard lock(db_->mutex());
  auto stored = stored_hash_locked(client_id);
  if (!stored) return stored.error();
  if (stored->empty()) return {};
  if (!token || !constant_time_equal(sha256_hex(*token), *stored))
    return unauthorized(client_id, token.has_value());
  return {};
}

void ClientCredentials::withdraw(const std::string& client_id) {
  std::lock_guard lock(db_->mutex());
  cache_.erase(client_id);
  if (auto st = db_->prepare("DELETE FROM client_credential WHERE client_id = ?")) {
    st->bind(1, client_id);
    (void)st->run();
  }
}

bool ClientCredentials::has_token(const std::string& client_id) {
  std::lock_guard lock(db_->mutex());
  auto stored = stored_hash_locked(client_id);
  return stored && !stored->empty();
}

}  // namespace sb::clienttool
