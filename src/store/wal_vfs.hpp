#pragma once
// A SQLite VFS over the default one that writes each WAL frame with one write(2) instead of two.
// SQLite writes a frame's 24-byte header and its page as two writes to adjacent offsets; this VFS
// holds the header back and writes it together with the page that follows it. Anything else
// done with the file first (a read, a sync, a truncation, its size, closing it, a write
// elsewhere) writes a held header on its own, so what reaches the file, and when, is what
// SQLite asked for. Every other file (the database, journals) and operation passes through.

namespace sb::store {

// The VFS's name for sqlite3_open_v2, registered on first use (not as the default).
const char* coalescing_wal_vfs();

}  // namespace sb::store
