// store::Database::Transaction: what was written either all lands or none of it does, and a
// transaction that failed leaves the connection ready for the next one.
#include "store/database.hpp"

#include <gtest/gtest.h>

namespace sb::store {
namespace {

std::int64_t count_rows(Database& db, std::string_view table) {
  auto st = db.prepare("SELECT count(*) FROM " + std::string(table));
  EXPECT_TRUE(st);
  auto row = st->step();
  EXPECT_TRUE(row && *row);
  return st->integer(0);
}

std::unique_ptr<Database> database_with_a_deferred_key() {
  auto db = Database::open_memory();
  EXPECT_TRUE(db) << db.error().message;
  // A deferred foreign key is checked at COMMIT: the way to make a COMMIT fail and leave the
  // transaction open, as a full disk can.
  auto made = (*db)->exec(
      "CREATE TABLE parent(id INTEGER PRIMARY KEY);"
      "CREATE TABLE child(parent_id INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);");
  EXPECT_TRUE(made) << made.error().message;
  return std::move(*db);
}

TEST(Transaction, AFailedCommitIsRolledBackAndTheNextTransactionWorks) {
  auto db = database_with_a_deferred_key();
  {
    Database::Transaction tx(*db);
    ASSERT_TRUE(db->exec("INSERT INTO parent(id) VALUES(1); INSERT INTO child VALUES(2)"));
    auto committed = tx.commit();
    ASSERT_FALSE(committed);
    EXPECT_NE(committed.error().message.find("FOREIGN KEY"), std::string::npos)
        << committed.error().message;
  }
  EXPECT_EQ(count_rows(*db, "parent"), 0);  // the good row went with the bad one
  EXPECT_EQ(count_rows(*db, "child"), 0);

  Database::Transaction next(*db);
  ASSERT_TRUE(db->exec("INSERT INTO parent(id) VALUES(1); INSERT INTO child VALUES(1)"));
  auto committed = next.commit();
  ASSERT_TRUE(committed) << committed.error().message;
  EXPECT_EQ(count_rows(*db, "child"), 1);
}

TEST(Transaction, OneThatCouldNotBeginCannotCommitAnotherOnesWrites) {
  auto db = database_with_a_deferred_key();
  Database::Transaction outer(*db);
  ASSERT_TRUE(db->exec("INSERT INTO parent(id) VALUES(1)"));
  {
    Database::Transaction inner(*db);  // BEGIN inside a transaction fails
    ASSERT_FALSE(inner.begun());
    auto committed = inner.commit();
    ASSERT_FALSE(committed);
    EXPECT_NE(committed.error().message.find("within a transaction"), std::string::npos)
        << committed.error().message;
  }
  // The inner one neither committed nor rolled back the outer one's row.
  auto committed = outer.commit();
  ASSERT_TRUE(committed) << committed.error().message;
  EXPECT_EQ(count_rows(*db, "parent"), 1);
}

}  // namespace
}  // namespace sb::store
