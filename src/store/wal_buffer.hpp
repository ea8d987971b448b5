#pragma once
// A VFS over SQLite's default one that holds a connection's writes to its WAL file in memory
// until store::Database ends a statement outside any transaction (a COMMIT, or a statement
// that committed on its own), and then writes them with one write per contiguous run.
//
// Why: SQLite writes each WAL frame as two writes (its 24-byte header, then its page), and a
// system call costs about a microsecond before it does anything on the machines we measure, so a
// transaction of nine frames paid eighteen. Held writes are exactly the bytes SQLite wrote, in its
// order; only their number changes. Nothing of a transaction is held once Database has returned
// from its COMMIT: the file then has what plain SQLite would have written, so a crash (kill -9)
// after that loses nothing, and a crash before it loses only what was not committed yet. Every
// other use of the WAL file (a read of a held range, sync, size, truncate, close, locks) writes
// what is held first, so SQLite never sees the file without its own writes.
#include <sqlite3.h>

namespace sb::store {

// The VFS's name for sqlite3_open_v2 (registered on the first call, not as the default).
const char* buffered_wal_vfs();

// Writes what `db`'s WAL holds (nothing to do for a connection of another VFS or with no WAL).
// SQLITE_OK, or the error of the write that failed; what was not written is kept and written by
// the next call.
int flush_wal(sqlite3* db);

}  // namespace sb::store
