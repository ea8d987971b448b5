#include "store/wal_vfs.hpp"

#include <sqlite3.h>

#include <cstring>
#include <vector>

namespace sb::store {
namespace {

// A WAL frame header (WAL_FRAME_HDRSIZE in SQLite's wal.c; the file's own header is 32 bytes).
constexpr int kFrameHeaderBytes = 24;

// Our file: SQLite allocates szOsFile bytes for it; the default VFS's file follows this struct.
struct File {
  sqlite3_file base;           // base.pMethods = &methods once the real file is open
  sqlite3_io_methods methods;  // ours, in the version of the real file's
  sqlite3_file* real;          // the default VFS's file, right after this struct
  bool wal;                    // only WAL files hold headers back
  sqlite3_int64 held_offset;
  int held_bytes;  // 0: nothing held
  unsigned char held[kFrameHeaderBytes];
};

sqlite3_vfs* base_vfs() {
  static sqlite3_vfs* base = sqlite3_vfs_find(nullptr);
  return base;
}

File* of(sqlite3_file* f) {
  return reinterpret_cast<File*>(f);
}

// Writes a held header on its own (before anything else touches the file).
int write_held(File* f) {
  if (f->held_bytes == 0) return SQLITE_OK;
  int bytes = f->held_bytes;
  f->held_bytes = 0;
  return f->real->pMethods->xWrite(f->real, f->held, bytes, f->held_offset);
}

// Runs `call` on the real file once a held header has been written.
template <class Call>
int after_held(sqlite3_file* file, Call call) {
  File* f = of(file);
  if (int rc = write_held(f); rc != SQLITE_OK) return rc;
  return call(f->real);
}

int x_close(sqlite3_file* file) {
  File* f = of(file);
  int held = write_held(f);
  int closed = f->real->pMethods->xClose(f->real);
  return held != SQLITE_OK ? held : closed;
}

int x_read(sqlite3_file* file, void* buffer, int bytes, sqlite3_int64 offset) {
  return after_held(
      file, [&](sqlite3_file* real) { return real->pMethods->xRead(real, buffer, bytes, offset); });
}

int x_write(sqlite3_file* file, const void* buffer, int bytes, sqlite3_int64 offset) {
  File* f = of(file);
  if (f->held_bytes != 0) {
    if (offset == f->held_offset + f->held_bytes) {
      // The page after the held header: both in one write.
      thread_local std::vector<unsigned char> joined;
      joined.resize(static_cast<std::size_t>(f->held_bytes + bytes));
      std::memcpy(joined.data(), f->held, static_cast<std::size_t>(f->held_bytes));
      std::memcpy(joined.data() + f->held_bytes, buffer, static_cast<std::size_t>(bytes));
      sqlite3_int64 at = f->held_offset;
      f->held_bytes = 0;
      return f->real->pMethods->xWrite(f->real, joined.data(), static_cast<int>(joined.size()), at);
    }
    if (int rc = write_held(f); rc != SQLITE_OK) return rc;
  }
  if (f->wal && bytes == kFrameHeaderBytes) {
    std::memcpy(f->held, buffer, kFrameHeaderBytes);
    f->held_offset = offset;
    f->held_bytes = bytes;
    return SQLITE_OK;
  }
  return f->real->pMethods->xWrite(f->real, buffer, bytes, offset);
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
  File* f = of(file);
  return f->real->pMethods->xLock(f->real, level);
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

int x_open(sqlite3_vfs* vfs, const char* name, sqlite3_file* file, int flags, int* out_flags) {
  auto* base = static_cast<sqlite3_vfs*>(vfs->pAppData);
  File* f = of(file);
  f->base.pMethods = nullptr;  // SQLite closes nothing if the open fails
  f->real = reinterpret_cast<sqlite3_file*>(f + 1);
  f->wal = (flags & SQLITE_OPEN_WAL) != 0;
  f->held_offset = 0;
  f->held_bytes = 0;
  int rc = base->xOpen(base, name, f->real, flags, out_flags);
  if (rc != SQLITE_OK || !f->real->pMethods) {
    // The default VFS may have set its methods on failure; it has then closed what it opened.
    return rc;
  }
  f->methods = methods_for(f->real->pMethods);
  f->base.pMethods = &f->methods;
  return SQLITE_OK;
}

// The VFS's other entry points, on the default VFS.
sqlite3_vfs* base_of(sqlite3_vfs* vfs) {
  return static_cast<sqlite3_vfs*>(vfs->pAppData);
}
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

}  // namespace

const char* coalescing_wal_vfs() {
  static const char* name = [] {
    static sqlite3_vfs vfs{};
    sqlite3_vfs* base = base_vfs();
    vfs.iVersion = 2;
    vfs.szOsFile = static_cast<int>(sizeof(File)) + base->szOsFile;
    vfs.mxPathname = base->mxPathname;
    vfs.zName = "switchboard-wal";
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
    return vfs.zName;
  }();
  return name;
}

}  // namespace sb::store
