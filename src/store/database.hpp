#pragma once
// A small RAII layer over SQLite: one connection, prepared statements, transactions. The store
// is opened in WAL mode so readers never wait for the writer.
//
// Not thread-safe on its own: the owner serializes access (one mutex per Database).
#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "util/error.hpp"

namespace sb::store {

class Statement {
 public:
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&&) = delete;
  Statement(const Statement&) = delete;
  ~Statement();

  Statement& bind(int index, std::string_view text);
  Statement& bind(int index, std::int64_t value);
  Statement& bind_null(int index);

  // Steps once: true while a row is available, false when done. Errors are Internal.
  Result<bool> step();
  // Steps to the end (for statements without rows).
  Result<void> run();
  void reset();

  std::string text(int column) const;
  std::int64_t integer(int column) const;
  bool is_null(int column) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

class Database {
 public:
  // Opens (creating) the file, enables WAL and foreign keys, sets a busy timeout.
  static Result<std::unique_ptr<Database>> open(const std::filesystem::path& path);
  // An in-memory database, for tests.
  static Result<std::unique_ptr<Database>> open_memory();
  ~Database();

  Result<void> exec(std::string_view sql);
  Result<Statement> prepare(std::string_view sql);
  std::int64_t changes() const;

  // BEGIN IMMEDIATE ... COMMIT, or ROLLBACK when the guard is destroyed uncommitted.
  class Transaction {
   public:
    explicit Transaction(Database& db);
    ~Transaction();
    Result<void> commit();

   private:
    Database& db_;
    bool done_ = false;
  };

 private:
  explicit Database(sqlite3* db) : db_(db) {}
  sqlite3* db_;
};

}  // namespace sb::store
