// query_database: the model runs read-only SQL on a local SQLite file (seed 000, "Database Query
// Tool"). The file is opened read-only, and a statement is run only when it is one SELECT (or
// WITH ... SELECT) that SQLite itself says does not write (sqlite3_stmt_readonly).
//
//   query_database --db FILE [--url URL] [--prompt TEXT]
//   query_database --db shop.db --prompt '/call client_example-sqlite_query_database {"query":
//   "SELECT * FROM orders"}'
#include <sqlite3.h>

#include <cctype>
#include <memory>
#include <mutex>

#include "example_session.hpp"

namespace {

namespace json = boost::json;
constexpr int kMaxRows = 1000;

std::string lowercase_first_word(const std::string& sql) {
  std::size_t i = 0;
  while (i < sql.size() && std::isspace(static_cast<unsigned char>(sql[i])))
    ++i;
  std::string word;
  while (i < sql.size() && std::isalpha(static_cast<unsigned char>(sql[i])))
    word += static_cast<char>(std::tolower(static_cast<unsigned char>(sql[i++])));
  return word;
}

json::value column_value(sqlite3_stmt* stmt, int i) {
  switch (sqlite3_column_type(stmt, i)) {
    case SQLITE_INTEGER:
      return sqlite3_column_int64(stmt, i);
    case SQLITE_FLOAT:
      return sqlite3_column_double(stmt, i);
    case SQLITE_NULL:
      return nullptr;
    case SQLITE_BLOB:
      return json::string("<blob of " + std::to_string(sqlite3_column_bytes(stmt, i)) + " bytes>");
    default:
      return json::string(reinterpret_cast<const char*>(sqlite3_column_text(stmt, i)),
                          static_cast<std::size_t>(sqlite3_column_bytes(stmt, i)));
  }
}

// Runs one read-only query; the rows as a JSON array of objects.
switchboard::ToolResult run_query(sqlite3* db, const std::string& sql) {
  std::string first = lowercase_first_word(sql);
  if (first != "select" && first != "with")
    throw std::runtime_error("Only SELECT queries are allowed");
  sqlite3_stmt* raw = nullptr;
  const char* tail = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &raw, &tail) != SQLITE_OK)
    throw std::runtime_error(std::string("SQL error: ") + sqlite3_errmsg(db));
  std::unique_ptr<sqlite3_stmt, decltype(&sqlite3_finalize)> stmt(raw, &sqlite3_finalize);
  if (!stmt) throw std::runtime_error("the query is empty");
  if (!sqlite3_stmt_readonly(stmt.get()))
    throw std::runtime_error("Only SELECT queries are allowed (this statement writes)");
  for (; tail && *tail; ++tail)
    if (!std::isspace(static_cast<unsigned char>(*tail)) && *tail != ';')
      throw std::runtime_error("Only one statement per query");

  json::array rows;
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW && rows.size() < kMaxRows) {
    json::object row;
    for (int i = 0; i < sqlite3_column_count(stmt.get()); ++i)
      row[sqlite3_column_name(stmt.get(), i)] = column_value(stmt.get(), i);
    rows.push_back(std::move(row));
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    throw std::runtime_error(std::string("SQL error: ") + sqlite3_errmsg(db));
  std::size_t count = rows.size();
  return {"Query results", json::serialize(rows),
          json::object{{"rowCount", count}, {"truncated", rc == SQLITE_ROW}}};
}

}  // namespace

int main(int argc, char** argv) {
  auto options = example::parse(argc, argv, {"db"}, "How many orders are there?", "--db FILE");
  if (!options.extra.count("db")) {
    std::cerr << argv[0] << ": --db FILE is required\n";
    return 2;
  }
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(options.extra["db"].c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
  std::unique_ptr<sqlite3, decltype(&sqlite3_close)> db(raw, &sqlite3_close);
  if (rc != SQLITE_OK) {
    std::cerr << argv[0] << ": cannot open " << options.extra["db"] << ": "
              << (raw ? sqlite3_errmsg(raw) : "out of memory") << "\n";
    return 1;
  }
  std::mutex db_mutex;  // handlers may run on several threads; the connection serves one at a time

  // Declared after `db`: the client (and its handlers) end before the connection closes.
  auto client = example::client_with_tool(
      options, "example-sqlite", "query_database",
      {"Execute a read-only SQL query on the local database",
       example::string_input("query", "SQL SELECT query to execute", true)},
      [&](const json::object& input, switchboard::ToolContext&) -> switchboard::ToolOutput {
        std::string sql(input.at("query").as_string());
        std::cerr << "query_database(" << sql << ")\n";
        std::lock_guard lock(db_mutex);
        return run_query(db.get(), sql);
      });
  return example::run_turn(*client, options.prompt);
}
