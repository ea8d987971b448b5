#include "store/wal_buffer.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

namespace sb::store {
namespace {

// Past this many held bytes (a transaction much larger than a turn's), what is held is written
// before more is taken: SQLite would have written it already.
constexpr std::size_t kMaxHeldBytes = 4u << 20;
// The default VFS writes at most 128 KiB - 1 bytes in one call (it masks the size with 0x1ffff,
// so a larger write is cut short and reported as a full disk): held runs go out in pieces.
constexpr std::size_t kMaxWriteBytes = 120u << 10;
// After a flush the buffer keeps at most this much capacity for the next transaction.
constexpr std::size_t kKeptCapacity = 256u << 10;

// SQLite's WAL layout (wal.c): a 32-byte file header, then frames of a 24-byte header and a page.
// A frame header's bytes 4-7 (big-endian) are the database size after the commit for the frame
// that commits a transaction, and zero for every other frame.
constexpr int kWalHeaderBytes = 32;
constexpr int kFrameHeaderBytes = 24;

bool is_commit_header(const void* buffer, int bytes) {
  if (bytes != kFrameHeaderBytes) return false;
  const auto* b = static_cast<const unsigned char*>(buffer);
  return (b[4] | b[5] | b[6] | b[7]) != 0;
}

// A contiguous run of held bytes: file offset, and where the bytes are in File::held.
struct Run {
  sqlite3_int64 offset;
  std::size_t at;
  std::size_t size;
  sqlite3_int64 end() const { return offset + static_cast<sqlite3_int64>(size); }
};

// Our file: SQLite allocates szOsFile bytes for it, and the default VFS's file follows it.
struct File {
  sqlite3_file base;           // base.pMethods = &methods once the real file is open
  sqlite3_io_methods methods;  // ours, in the version of the real file's
  sqlite3_file* real;          // the default VFS's file, right after this struct
  bool wal;                    // only a WAL file holds writes
  // Constructed in x_open, destroyed in x_close (SQLite's memory for the file is raw).
  std::vector<unsigned char>* held;
  std::vector<Run>* runs;  // in the order SQLite wrote them
  // Where the page of a commit frame whose header was just taken goes: that write ends the commit
  // and is written with everything held before SQLite goes on. -1: none expected.
  sqlite3_int64 commit_page_at;
  // The end of the frames written since the WAL (re)started: a frame header below it rewrites a
  // frame (checksums after a cache spill), at or past it appends one.
  sqlite3_int64 written_end;
};

File* of(sqlite3_file* f) {
  return reinterpret_cast<File*>(f);
}

// Writes the held runs in order; on a failure the runs not yet written stay held.
int write_held(File* f) {
  if (!f->wal || f->runs->empty()) return SQLITE_OK;
  std::size_t written = 0;
  int rc = SQLITE_OK;
  for (const Run& run : *f->runs) {
    for (std::size_t done = 0; done < run.size && rc == SQLITE_OK;) {
      std::size_t piece = std::min(run.size - done, kMaxWriteBytes);
      rc = f->real->pMethods->xWrite(f->real, f->held->data() + run.at + done,
                                     static_cast<int>(piece),
                                     run.offset + static_cast<sqlite3_int64>(done));
      done += piece;
    }
    if (rc != SQLITE_OK) break;
    ++written;
  }
  if (rc != SQLITE_OK) {
    f->runs->erase(f->runs->begin(), f->runs->begin() + static_cast<std::ptrdiff_t>(written));
    return rc;
  }
  f->runs->clear();
  f->held->clear();
  if (f->held->capacity() > kKeptCapacity) std::vector<unsigned char>().swap(*f->held);
  return SQLITE_OK;
}

// Writes what is held for a commit. If that fails, SQLite's write of the commit frame fails, and
// SQLite rolls the transaction back as it would after a failed write of its own; what was held
// (frames of that transaction only: an earlier commit left nothing held) is dropped, so the file
// keeps a prefix of SQLite's writes without this commit frame, and no later write brings the
// rolled-back transaction to the disk.
int write_commit(File* f) {
  f->commit_page_at = -1;
  int rc = write_held(f);
  if (rc != SQLITE_OK) {
    f->runs->clear();
    f->held->clear();
  }
  return rc;
}

// Before any other use of the file: what is held goes to the file.
int settle(File* f) {
  if (!f->wal) return SQLITE_OK;
  return f->commit_page_at >= 0 ? write_commit(f) : write_held(f);
}

// Runs `call` on the real file once what is held has been written.
template <class Call>
int after_held(sqlite3_file* file, Call call) {
  File* f = of(file);
  if (int rc = settle(f); rc != SQLITE_OK) return rc;
  return call(f->real);
}

int x_close(sqlite3_file* file) {
  File* f = of(file);
  int held = settle(f);
  int closed = f->real->pMethods->xClose(f->real);
  delete f->held;
  delete f->runs;
  return held != SQLITE_OK ? held : closed;
}

int x_read(sqlite3_file* file, void* buffer, int bytes, sqlite3_int64 offset) {
  File* f = of(file);
  if (f->wal) {
    bool overlaps = f->commit_page_at >= 0;
    for (const Run& run : *f->runs)
      overlaps = overlaps || (offset < run.end() && run.offset < offset + bytes);
    if (overlaps)
      if (int rc = settle(f); rc != SQLITE_OK) return rc;
  }
  return f->real->pMethods->xRead(f->real, buffer, bytes, offset);
}

// Holds a write; true when it continued the last held run.
bool hold(File* f, const void* buffer, std::size_t size, sqlite3_int64 offset) {
  const auto* bytes_in = static_cast<const unsigned char*>(buffer);
  bool continued = !f->runs->empty() && f->runs->back().end() == offset;
  if (continued)
    f->runs->back().size += size;
  else
    f->runs->push_back(Run{offset, f->held->size(), size});
  f->held->insert(f->held->end(), bytes_in, bytes_in + size);
  return continued;
}

int x_write_held(File* f, const void* buffer, int bytes, sqlite3_int64 offset);

int x_write(sqlite3_file* file, const void* buffer, int bytes, sqlite3_int64 offset) {
  File* f = of(file);
  if (!f->wal) return f->real->pMethods->xWrite(f->real, buffer, bytes, offset);
  // No exception may cross SQLite's C frames.
  try {
    return x_write_held(f, buffer, bytes, offset);
  } catch (const std::bad_alloc&) {
    return SQLITE_IOERR_NOMEM;
  }
}

int x_write_held(File* f, const void* buffer, int bytes, sqlite3_int64 offset) {
  auto size = static_cast<std::size_t>(bytes);
  sqlite3_int64 end = offset + bytes;
  if (offset == 0 && bytes == kWalHeaderBytes) f->written_end = kWalHeaderBytes;  // WAL restart
  // The page of the commit frame whose header came last: the commit's last write.
  if (f->commit_page_at >= 0) {
    if (offset == f->commit_page_at) {
      hold(f, buffer, size, offset);
      f->written_end = std::max(f->written_end, end);
      return write_commit(f);
    }
    if (int rc = write_commit(f); rc != SQLITE_OK) return rc;  // not expected: write it all now
  }
  bool commit = is_commit_header(buffer, bytes);
  bool appended = offset >= f->written_end;
  f->written_end = std::max(f->written_end, end);
  // A write inside a held run (SQLite rewriting frame checksums after a cache spill) changes the
  // held bytes; one that overlaps held bytes otherwise, or would hold too much, writes them first.
  bool inside = false;
  for (Run& run : *f->runs)
    if (run.offset <= offset && end <= run.end()) {
      std::memcpy(f->held->data() + run.at + static_cast<std::size_t>(offset - run.offset), buffer,
                  size);
      inside = true;
      break;
    }
  bool continued = false;
  if (!inside) {
    bool overlaps = false;
    for (const Run& run : *f->runs)
      overlaps = overlaps || (offset < run.end() && run.offset < end);
    if (overlaps || f->held->size() + size > kMaxHeldBytes)
      if (int rc = write_held(f); rc != SQLITE_OK) return rc;
    continued = hold(f, buffer, size, offset);
  }
  if (!commit) return SQLITE_OK;
  // A commit frame's header. Appended after the frames before it, it is held with them and its
  // page (the next write) writes them all. Anything else (SQLite rewriting the commit frame's
  // checksum after a cache spill, its last write for the commit) is written at once, and so is a
  // page that follows.
  f->commit_page_at = offset + kFrameHeaderBytes;
  if (appended && !inside && (continued || f->runs->size() == 1)) return SQLITE_OK;
  int rc = write_commit(f);
  f->commit_page_at = rc == SQLITE_OK ? offset + kFrameHeaderBytes : -1;
  return rc;
}

int x_truncate(sqlite3_file* file, sqlite3_int64 size) {
  return after_held(file,
                    [&](sqlite3_file* real) { return real->pMethods->xTruncate(real, size); });
}

int x_sync(sqlite3_file* file, int flags) {
  return after_held(file, [&](sqlite3_file* real) { return real->pMethods->xSync(real, flags); });
}

int x_file_size(sqlite3_file* file, sqlite3_int64* size) {
  return after_held(file,
                    [&](sqlite3_file* real) { return real->pMethods->xFileSize(real, size); });
}

int x_lock(sqlite3_file* file, int level) {
  return after_held(file, [&](sqlite3_file* real) { return real->pMethods->xLock(real, level); });
}

int x_unlock(sqlite3_file* file, int level) {
  return after_held(file, [&](sqlite3_file* real) { return real->pMethods->xUnlock(real, level); });
}

int x_check_reserved_lock(sqlite3_file* file, int* out) {
  File* f = of(file);
  return f->real->pMethods->xCheckReservedLock(f->real, out);
}

int x_file_control(sqlite3_file* file, int op, void* arg) {
  return after_held(
      file, [&](sqlite3_file* real) { return real->pMethods->xFileControl(real, op, arg); });
}

int x_sector_size(sqlite3_file* file) {
  File* f = of(file);
  return f->real->pMethods->xSectorSize(f->real);
}

int x_device_characteristics(sqlite3_file* file) {
  File* f = of(file);
  return f->real->pMethods->xDeviceCharacteristics(f->real);
}

// SQLite calls the shared-memory methods on the database file, never on the WAL, and only without
// exclusive locking (store::Database always locks exclusively): they pass through.
int x_shm_map(sqlite3_file* file, int page, int page_size, int extend, void volatile** out) {
  File* f = of(file);
  return f->real->pMethods->xShmMap(f->real, page, page_size, extend, out);
}

int x_shm_lock(sqlite3_file* file, int offset, int n, int flags) {
  File* f = of(file);
  return f->real->pMethods->xShmLock(f->real, offset, n, flags);
}

void x_shm_barrier(sqlite3_file* file) {
  File* f = of(file);
  f->real->pMethods->xShmBarrier(f->real);
}

int x_shm_unmap(sqlite3_file* file, int delete_flag) {
  File* f = of(file);
  return f->real->pMethods->xShmUnmap(f->real, delete_flag);
}

int x_fetch(sqlite3_file* file, sqlite3_int64 offset, int bytes, void** out) {
  return after_held(
      file, [&](sqlite3_file* real) { return real->pMethods->xFetch(real, offset, bytes, out); });
}

int x_unfetch(sqlite3_file* file, sqlite3_int64 offset, void* page) {
  File* f = of(file);
  return f->real->pMethods->xUnfetch(f->real, offset, page);
}

// Our methods in the version of the real file's (a method the real file lacks stays absent).
sqlite3_io_methods methods_for(const sqlite3_io_methods* real) {
  sqlite3_io_methods m{};
  m.iVersion = real->iVersion;
  m.xClose = x_close;
  m.xRead = x_read;
  m.xWrite = x_write;
  m.xTruncate = x_truncate;
  m.xSync = x_sync;
  m.xFileSize = x_file_size;
  m.xLock = x_lock;
  m.xUnlock = x_unlock;
  m.xCheckReservedLock = x_check_reserved_lock;
  m.xFileControl = x_file_control;
  m.xSectorSize = x_sector_size;
  m.xDeviceCharacteristics = x_device_characteristics;
  if (real->iVersion >= 2) {
    m.xShmMap = real->xShmMap ? x_shm_map : nullptr;
    m.xShmLock = real->xShmLock ? x_shm_lock : nullptr;
    m.xShmBarrier = real->xShmBarrier ? x_shm_barrier : nullptr;
    m.xShmUnmap = real->xShmUnmap ? x_shm_unmap : nullptr;
  }
  if (real->iVersion >= 3) {
    m.xFetch = real->xFetch ? x_fetch : nullptr;
    m.xUnfetch = real->xUnfetch ? x_unfetch : nullptr;
  }
  return m;
}

sqlite3_vfs* base_of(sqlite3_vfs* vfs) {
  return static_cast<sqlite3_vfs*>(vfs->pAppData);
}

int x_open(sqlite3_vfs* vfs, const char* name, sqlite3_file* file, int flags, int* out_flags) {
  sqlite3_vfs* base = base_of(vfs);
  File* f = of(file);
  f->base.pMethods = nullptr;  // SQLite closes nothing if the open fails
  f->real = reinterpret_cast<sqlite3_file*>(f + 1);
  f->wal = (flags & SQLITE_OPEN_WAL) != 0;
  f->held = nullptr;
  f->runs = nullptr;
  if (f->wal) {
    try {
      f->held = new std::vector<unsigned char>();
      f->runs = new std::vector<Run>();
    } catch (const std::bad_alloc&) {
      delete f->held;
      return SQLITE_NOMEM;
    }
  }
  int rc = base->xOpen(base, name, f->real, flags, out_flags);
  if (rc != SQLITE_OK || !f->real->pMethods) {
    // The default VFS may have set its methods on failure; it has then closed what it opened.
    delete f->held;
    delete f->runs;
    return rc;
  }
  f->commit_page_at = -1;
  f->written_end = 0;
  f->methods = methods_for(f->real->pMethods);
  f->base.pMethods = &f->methods;
  return SQLITE_OK;
}

// The VFS's other entry points, on the default VFS.
int x_delete(sqlite3_vfs* vfs, const char* name, int sync_dir) {
  return base_of(vfs)->xDelete(base_of(vfs), name, sync_dir);
}
int x_access(sqlite3_vfs* vfs, const char* name, int flags, int* out) {
  return base_of(vfs)->xAccess(base_of(vfs), name, flags, out);
}
int x_full_pathname(sqlite3_vfs* vfs, const char* name, int size, char* out) {
  return base_of(vfs)->xFullPathname(base_of(vfs), name, size, out);
}
void* x_dl_open(sqlite3_vfs* vfs, const char* name) {
  return base_of(vfs)->xDlOpen(base_of(vfs), name);
}
void x_dl_error(sqlite3_vfs* vfs, int size, char* out) {
  base_of(vfs)->xDlError(base_of(vfs), size, out);
}
void (*x_dl_sym(sqlite3_vfs* vfs, void* handle, const char* symbol))(void) {
  return base_of(vfs)->xDlSym(base_of(vfs), handle, symbol);
}
void x_dl_close(sqlite3_vfs* vfs, void* handle) {
  base_of(vfs)->xDlClose(base_of(vfs), handle);
}
int x_randomness(sqlite3_vfs* vfs, int size, char* out) {
  return base_of(vfs)->xRandomness(base_of(vfs), size, out);
}
int x_sleep(sqlite3_vfs* vfs, int microseconds) {
  return base_of(vfs)->xSleep(base_of(vfs), microseconds);
}
int x_current_time(sqlite3_vfs* vfs, double* out) {
  return base_of(vfs)->xCurrentTime(base_of(vfs), out);
}
int x_get_last_error(sqlite3_vfs* vfs, int size, char* out) {
  return base_of(vfs)->xGetLastError ? base_of(vfs)->xGetLastError(base_of(vfs), size, out) : 0;
}
int x_current_time_int64(sqlite3_vfs* vfs, sqlite3_int64* out) {
  return base_of(vfs)->xCurrentTimeInt64(base_of(vfs), out);
}

sqlite3_vfs* registered_vfs() {
  static sqlite3_vfs* registered = [] {
    static sqlite3_vfs vfs{};
    sqlite3_vfs* base = sqlite3_vfs_find(nullptr);
    vfs.iVersion = 2;
    vfs.szOsFile = static_cast<int>(sizeof(File)) + base->szOsFile;
    vfs.mxPathname = base->mxPathname;
    vfs.zName = "switchboard-buffered-wal";
    vfs.pAppData = base;
    vfs.xOpen = x_open;
    vfs.xDelete = x_delete;
    vfs.xAccess = x_access;
    vfs.xFullPathname = x_full_pathname;
    vfs.xDlOpen = x_dl_open;
    vfs.xDlError = x_dl_error;
    vfs.xDlSym = x_dl_sym;
    vfs.xDlClose = x_dl_close;
    vfs.xRandomness = x_randomness;
    vfs.xSleep = x_sleep;
    vfs.xCurrentTime = x_current_time;
    vfs.xGetLastError = x_get_last_error;
    vfs.xCurrentTimeInt64 = base->iVersion >= 2 ? x_current_time_int64 : nullptr;
    sqlite3_vfs_register(&vfs, 0);
    return &vfs;
  }();
  return registered;
}

}  // namespace

const char* buffered_wal_vfs() {
  return registered_vfs()->zName;
}

}  // namespace sb::store
