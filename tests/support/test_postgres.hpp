#pragma once
// Test support: the PostgreSQL that the test command starts (scripts/test-services.sh, the CTest
// fixture `postgres`) for the suites that run a second time on it (the "pg." tests). Such a run
// has $SWITCHBOARD_TEST_POSTGRES, the fixture's state directory, where postgres.url is. Each store
// gets a schema of its own in the one database (a database per test would copy 7.5 MB each),
// named by the caller.
#include <optional>
#include <string>

namespace sb::test {

// This run's suites keep their stores in PostgreSQL ($SWITCHBOARD_TEST_POSTGRES is set).
bool storage_is_postgres();
// The fixture's URL (postgresql://switchboard@127.0.0.1:PORT/switchboard_test); nullopt when
// no fixture runs (a plain ctest -R of one binary).
std::optional<std::string> test_postgres_url();
// Makes schema `name` (removed first when `fresh`) in the fixture's database and returns the URL
// whose connections use it (search_path). Throws when the fixture cannot be reached.
std::string postgres_schema_url(const std::string& name, bool fresh);
// The store of a server started on `data_dir` in this pass (ServerProcess names its schema so).
std::string postgres_store_url(const std::string& data_dir);
// Runs `sql` on `url`; the first column of its first row ("" when it has none). Throws when it
// fails. For tests that look into (or change) what a server stored.
std::string postgres_query(const std::string& url, const std::string& sql);
// A schema name for `key` (a data directory, a test's name): "sb_" and a hash.
std::string schema_name_for(const std::string& key);

}  // namespace sb::test
