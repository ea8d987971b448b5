#include "test_postgres.hpp"

#include <libpq-fe.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>

namespace sb::test {

namespace {
const char* services_dir() {
  const char* dir = std::getenv("SWITCHBOARD_TEST_POSTGRES");
  return dir && *dir ? dir : nullptr;
}
}  // namespace

bool storage_is_postgres() {
  return services_dir() != nullptr;
}

std::optional<std::string> test_postgres_url() {
  const char* dir = services_dir();
  if (!dir) return std::nullopt;
  std::ifstream in(std::string(dir) + "/postgres.url");
  std::string url;
  if (!in || !std::getline(in, url) || url.empty()) return std::nullopt;
  return url;
}

std::string schema_name_for(const std::string& key) {
  std::ostringstream name;
  name << "sb_" << std::hex << std::hash<std::string>{}(key);
  return name.str();
}

std::string postgres_query(const std::string& url, const std::string& sql) {
  PGconn* conn = PQconnectdb(url.c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string why = PQerrorMessage(conn);
    PQfinish(conn);
    throw std::runtime_error("cannot connect to the PostgreSQL fixture: " + why);
  }
  // Quiet: "schema ... does not exist, skipping" and the like are notices.
  PQsetNoticeProcessor(
      conn, [](void*, const char*) {}, nullptr);
  PGresult* res = PQexec(conn, sql.c_str());
  auto status = PQresultStatus(res);
  std::string value = status == PGRES_TUPLES_OK && PQntuples(res) > 0 ? PQgetvalue(res, 0, 0) : "";
  std::string why = PQresultErrorMessage(res);
  PQclear(res);
  PQfinish(conn);
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK)
    throw std::runtime_error("postgres: " + sql + ": " + why);
  return value;
}

std::string postgres_schema_url(const std::string& name, bool fresh) {
  auto url = test_postgres_url();
  if (!url)
    throw std::runtime_error(
        "no PostgreSQL fixture: $SWITCHBOARD_TEST_POSTGRES/postgres.url is missing (run the test "
        "through ctest, which starts it)");
  postgres_query(*url, (fresh ? "DROP SCHEMA IF EXISTS " + name + " CASCADE; " : std::string()) +
                           "CREATE SCHEMA IF NOT EXISTS " + name);
  return *url + (url->find('?') == std::string::npos ? "?" : "&") + "options=-csearch_path%3D" +
         name;
}

std::string postgres_store_url(const std::string& data_dir) {
  return postgres_schema_url(schema_name_for(data_dir), false);
}

}  // namespace sb::test
