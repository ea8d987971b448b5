#pragma once
// A VFS over SQLite's default one that holds a connection's writes to its WAL file in memory and
// writes them when a transaction commits: SQLite's write of the commit frame's page (the last
// write of a commit) writes everything held, one write per contiguous run, and returns that
// write's outcome to SQLite.
//
// Why: SQLite writes each WAL frame as two writes (its 24-byte header, then its page), and a
// system call costs about a microsecond before it does anything on the machines we measure, so a
// transaction of nine frames paid eighteen. Held writes are exactly the bytes SQLite wrote, in its
// order; only their number changes. When a commit returns, the file has what plain SQLite would
// have written, so a crash (kill -9) after it loses nothing. When the commit's write fails (a full
// disk), SQLite sees its write fail and rolls the transaction back, as it would without this
// layer; what was held is dropped, so the rolled-back transaction never reaches the file later.
// Every other use of the WAL file (a read of a held range, sync, size, truncate, close, locks)
// writes what is held first, so SQLite never reads the file without its own writes.
//
// Only for connections in exclusive locking mode (store::Database's): another connection reading
// the WAL through the shared-memory index could otherwise see a commit before its frames are in
// the file.
#include <sqlite3.h>

namespace sb::store {

// The VFS's name for sqlite3_open_v2 (registered on the first call, not as the default).
const char* buffered_wal_vfs();

}  // namespace sb::store
