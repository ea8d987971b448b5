#include "store/database.hpp"

namespace sb::store {

std::string_view engine_name(Engine engine) {
  return engine == Engine::Sqlite ? "sqlite" : "postgres";
}

Result<void> Statement::run() {
  for (;;) {
    auto r = step();
    if (!r) return r.error();
    if (!*r) return {};
  }
}

Result<Statement> Database::prepare(std::string_view sql) {
  auto it = statements_.find(sql);
  if (it != statements_.end() && it->second->take()) return Statement(it->second.get());
  bool keep = it == statements_.end();
  auto cursor = compile(sql, keep);
  if (!cursor) return cursor.error();
  Cursor* handed = cursor->get();
  handed->take();
  if (keep)
    statements_.emplace(std::string(sql), std::move(*cursor));
  else
    cursor->release();  // the Statement deletes it when done
  return Statement(handed);
}

Result<void> Database::run(std::string_view sql) {
  auto st = prepare(sql);
  if (!st) return st.error();
  return st->run();
}

Database::Transaction::Transaction(Database& db) : db_(db), begun_(db_.run(db_.begin_sql())) {}

Database::Transaction::~Transaction() {
  // After a failed COMMIT too: SQLite rolls some failures back itself and not others (a full
  // disk may leave the transaction open), and a ROLLBACK with none open is harmless.
  if (!done_ && begun_) (void)db_.run("ROLLBACK");
}

Result<void> Database::Transaction::commit() {
  if (!begun_) return begun_.error();
  auto committed = db_.run("COMMIT");
  if (committed) done_ = true;
  return committed;
}

}  // namespace sb::store
