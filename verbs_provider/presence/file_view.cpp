// SPDX-License-Identifier: BSD-2-Clause
// Opens and stats of the file view (file_view.h). A file of the view opens as an in-memory copy
// of its contents (a memfd written at open: nothing on disk, nothing left behind, and the values
// are the segment's at that moment, as a sysfs attribute is rendered at open).
// /dev/infiniband/rdma_cm opens through the RDMA CM emulation (cm/cdev.h); its descriptors stat as
// the character device.
#include "file_view.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>

#include "cm/cdev.h"

extern "C" int __open_2(const char*, int);
extern "C" int __open64_2(const char*, int);
extern "C" int __openat_2(int, const char*, int);
extern "C" int __openat64_2(int, const char*, int);

static_assert(sizeof(struct stat) == sizeof(struct stat64), "one layout serves both (x86_64)");

namespace emu::prov::view {
namespace {

constexpr int kHost = -2;  // the path is not the view's: the caller passes it on untouched
const dev_t kViewDev = makedev(0, 0xee);

// Descriptors of the view's character devices, with the file each was, so that a number the
// program closed and reused for another file is not taken for one. At most kCdevFds open at once
// read as character devices (librdmacm checks each event channel's once, when it opens it). No
// lock: a slot is claimed with a compare-and-swap of its state and published with a release store,
// so fstat, which every program calls, takes no mutex (each is a point of a scheduled run).
struct CdevFd {
  enum State : int { kFree, kWriting, kReady };
  std::atomic<int> state{kFree};
  int fd = -1;
  dev_t dev = 0;
  ino_t ino = 0;
  dev_t rdev = 0;
};
constexpr int kCdevFds = 32;
CdevFd g_cdev_fds[kCdevFds];
std::atomic<int> g_cdev_count{0};  // slots ever claimed: 0 in a process that never opened one

bool same_file(const CdevFd& c, const struct stat& st) {
  return st.st_dev == c.dev && st.st_ino == c.ino;
}

// Whether a ready slot's descriptor no longer is its file (closed, or reused for another).
bool stale(const CdevFd& c, int fd) {
  struct stat now;
  return c.fd == fd || LIBC(fstat)(c.fd, &now) != 0 || !same_file(c, now);
}

void remember_cdev(int fd, dev_t rdev) {
  struct stat st;
  if (LIBC(fstat)(fd, &st) != 0) return;
  for (CdevFd& c : g_cdev_fds) {
    int was = c.state.load(std::memory_order_acquire);
    if (was == CdevFd::kWriting || (was == CdevFd::kReady && !stale(c, fd))) continue;
    if (!c.state.compare_exchange_strong(was, CdevFd::kWriting, std::memory_order_acquire))
      continue;
    if (was == CdevFd::kFree) g_cdev_count.fetch_add(1, std::memory_order_relaxed);
    c.fd = fd, c.dev = st.st_dev, c.ino = st.st_ino, c.rdev = rdev;
    c.state.store(CdevFd::kReady, std::memory_order_release);
    return;
  }
}

// After libc's fstat of `fd`: a view character device's descriptor reads as one.
void patch_cdev(int fd, struct stat* st) {
  if (g_cdev_count.load(std::memory_order_relaxed) == 0) return;  // the common case: none opened
  for (const CdevFd& c : g_cdev_fds)
    if (c.state.load(std::memory_order_acquire) == CdevFd::kReady && c.fd == fd &&
        same_file(c, *st) && cm_cdev_is_channel(fd)) {
      st->st_mode = S_IFCHR | 0666;
      st->st_rdev = c.rdev;
      return;
    }
}

int fail(int err) {
  errno = err;
  return -1;
}

int open_file(const Node& n, int flags) {
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC))) return fail(EACCES);
  std::string text;
  if (int err = file_content(n, &text)) return fail(err);
  int fd = memfd_create("rdmaemu-sysfs", (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
  if (fd < 0) return -1;
  if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
      lseek(fd, 0, SEEK_SET) != 0) {
    int err = errno;
    close(fd);
    return fail(err);
  }
  return fd;
}

// open(2) of an absolute path: a descriptor, -1 with errno, or kHost.
int open_in_view(const char* path, int flags, mode_t mode) {
  if (!may_be_view_path(path)) return kHost;
  Lookup l = lookup(path, !(flags & O_NOFOLLOW));
  if (l.where == Where::host) return kHost;
  if (l.where == Where::redirected) return LIBC(open64)(l.host_path.c_str(), flags, mode);
  if (l.err) return fail(l.err);
  const Node& n = l.node;
  switch (n.kind()) {
    case Kind::symlink:
      return fail(ELOOP);  // O_NOFOLLOW on a link
    case Kind::dir: {
      // The host's own directory if it has one; a directory of ours alone has no descriptor
      // (see docs/design/rdma-cm-and-presence.md, "Device presence").
      int fd = n.may_exist_for_real() ? LIBC(open64)(path, flags, mode) : -1;
      return fd >= 0 || errno != ENOENT ? fd : fail(EOPNOTSUPP);
    }
    case Kind::file:
      return (flags & O_DIRECTORY) ? fail(ENOTDIR) : open_file(n, flags);
    case Kind::cdev: {
      if (flags & O_DIRECTORY) return fail(ENOTDIR);
      // A uverbs node is for stat only: every emu context is opened through ibv_open_device.
      if (n.id != Id::cm_cdev) return fail(ENXIO);
      int fd = cm_cdev_open(flags & (O_CLOEXEC | O_NONBLOCK));
      if (fd >= 0) remember_cdev(fd, cdev_number(n));
      return fd;
    }
  }
  return fail(ENOENT);
}

mode_t mode_arg(int flags, va_list ap) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, mode_t) : 0;
}

// stat(2) of an absolute path: 0, -1 with errno, or kHost.
int stat_in_view(const char* path, bool follow, struct stat* st) {
  if (!may_be_view_path(path)) return kHost;
  Lookup l = lookup(path, follow);
  if (l.where == Where::host) return kHost;
  int at = follow ? 0 : AT_SYMLINK_NOFOLLOW;
  if (l.where == Where::redirected)
    return LIBC(fstatat64)(AT_FDCWD, l.host_path.c_str(), reinterpret_cast<struct stat64*>(st), at);
  if (l.err) return fail(l.err);
  // A directory the host has for real answers as itself (its own times and inode).
  if (l.node.may_exist_for_real() && LIBC(stat)(path, st) == 0) return 0;
  fill_stat(l.node, st);
  return 0;
}

int at_in_view(int dirfd, const char* path, int flags, struct stat* st) {
  if (path && !path[0] && (flags & AT_EMPTY_PATH)) {
    int rc = LIBC(fstat)(dirfd, st);
    if (rc == 0) patch_cdev(dirfd, st);
    return rc;
  }
  return stat_in_view(path, !(flags & AT_SYMLINK_NOFOLLOW), st);
}

void to_statx(const struct stat& st, struct statx* x) {
  std::memset(x, 0, sizeof *x);
  x->stx_mask = STATX_BASIC_STATS;
  x->stx_blksize = static_cast<uint32_t>(st.st_blksize);
  x->stx_nlink = static_cast<uint32_t>(st.st_nlink);
  x->stx_uid = st.st_uid;
  x->stx_gid = st.st_gid;
  x->stx_mode = static_cast<uint16_t>(st.st_mode);
  x->stx_ino = st.st_ino;
  x->stx_size = static_cast<uint64_t>(st.st_size);
  x->stx_blocks = static_cast<uint64_t>(st.st_blocks);
  x->stx_rdev_major = major(st.st_rdev);
  x->stx_rdev_minor = minor(st.st_rdev);
  x->stx_dev_major = major(st.st_dev);
  x->stx_dev_minor = minor(st.st_dev);
  x->stx_atime.tv_sec = st.st_atime;
  x->stx_mtime.tv_sec = st.st_mtime;
  x->stx_ctime.tv_sec = st.st_ctime;
}

int access_in_view(const char* path, int mode) {
  struct stat st;
  int rc = stat_in_view(path, true, &st);
  if (rc != 0) return rc;
  bool writable = S_ISCHR(st.st_mode);  // sysfs entries are read-only, the devices are not
  if ((mode & W_OK) && !writable) return fail(EACCES);
  if ((mode & X_OK) && !S_ISDIR(st.st_mode)) return fail(EACCES);
  return 0;
}

}  // namespace

void fill_stat(const Node& n, struct stat* st) {
  static const time_t since = time(nullptr);  // the view's entries appear with this process
  std::memset(st, 0, sizeof *st);
  st->st_atime = st->st_mtime = st->st_ctime = since;
  st->st_dev = kViewDev;
  st->st_ino = std::hash<std::string>{}(n.path) | 1;
  st->st_nlink = 1;
  st->st_blksize = 4096;
  switch (n.kind()) {
    case Kind::dir:
      st->st_mode = S_IFDIR | 0755;
      st->st_nlink = 2;
      break;
    case Kind::file:
      st->st_mode = S_IFREG | 0444;
      st->st_size = 4096;  // what sysfs reports for every attribute
      break;
    case Kind::symlink:
      st->st_mode = S_IFLNK | 0777;
      break;
    case Kind::cdev:
      st->st_mode = S_IFCHR | 0666;
      st->st_rdev = cdev_number(n);
      break;
  }
}

}  // namespace emu::prov::view

using namespace emu::prov::view;

// The view's answer, or libc's own function with the caller's arguments when the path is the
// host's.
#define VIEW_OR_LIBC(fn, in_view, ...) \
  int rc = in_view;                    \
  return rc != kHost ? rc : LIBC(fn)(__VA_ARGS__)
// open's third argument, present only when a file may be created.
#define MODE_ARG(flags, mode)        \
  va_list ap;                        \
  va_start(ap, flags);               \
  mode_t mode = mode_arg(flags, ap); \
  va_end(ap)

// The stat functions glibc before 2.33 had programs call (still exported for their binaries).
extern "C" int __xstat(int, const char*, struct stat*);
extern "C" int __xstat64(int, const char*, struct stat64*);
extern "C" int __lxstat(int, const char*, struct stat*);
extern "C" int __lxstat64(int, const char*, struct stat64*);
extern "C" int __fxstat(int, int, struct stat*);
extern "C" int __fxstat64(int, int, struct stat64*);
extern "C" int __fxstatat(int, int, const char*, struct stat*, int);
extern "C" int __fxstatat64(int, int, const char*, struct stat64*, int);

static struct stat* as_stat(struct stat64* st) { return reinterpret_cast<struct stat*>(st); }

// fstat: libc's answer, then a view character device's descriptor reads as one.
static int fstat_fd(int fd, struct stat* st, int rc) {
  if (rc == 0) patch_cdev(fd, st);
  return rc;
}

extern "C" {

int open(const char* path, int flags, ...) {
  MODE_ARG(flags, mode);
  VIEW_OR_LIBC(open, open_in_view(path, flags, mode), path, flags, mode);
}
int open64(const char* path, int flags, ...) {
  MODE_ARG(flags, mode);
  VIEW_OR_LIBC(open64, open_in_view(path, flags, mode), path, flags, mode);
}
int openat(int dirfd, const char* path, int flags, ...) {
  MODE_ARG(flags, mode);
  VIEW_OR_LIBC(openat, open_in_view(path, flags, mode), dirfd, path, flags, mode);
}
int openat64(int dirfd, const char* path, int flags, ...) {
  MODE_ARG(flags, mode);
  VIEW_OR_LIBC(openat64, open_in_view(path, flags, mode), dirfd, path, flags, mode);
}
int __open_2(const char* path, int flags) {
  VIEW_OR_LIBC(__open_2, open_in_view(path, flags, 0), path, flags);
}
int __open64_2(const char* path, int flags) {
  VIEW_OR_LIBC(__open64_2, open_in_view(path, flags, 0), path, flags);
}
int __openat_2(int dirfd, const char* path, int flags) {
  VIEW_OR_LIBC(__openat_2, open_in_view(path, flags, 0), dirfd, path, flags);
}
int __openat64_2(int dirfd, const char* path, int flags) {
  VIEW_OR_LIBC(__openat64_2, open_in_view(path, flags, 0), dirfd, path, flags);
}

// fopen's modes as open(2) flags ("r", "r+", "w", "a", with 'e' for close-on-exec).
static int fopen_flags(const char* mode) {
  int flags =
      mode[0] == 'r' ? O_RDONLY : O_WRONLY | O_CREAT | (mode[0] == 'w' ? O_TRUNC : O_APPEND);
  if (std::strchr(mode, '+')) flags = (flags & ~O_ACCMODE) | O_RDWR;
  if (std::strchr(mode, 'e')) flags |= O_CLOEXEC;
  return flags;
}

static FILE* fopen_in_view(const char* path, const char* mode,
                           FILE* (*host)(const char*, const char*)) {
  if (!may_be_view_path(path)) return host(path, mode);
  int fd = open_in_view(path, fopen_flags(mode), 0666);
  if (fd == kHost) return host(path, mode);
  if (fd < 0) return nullptr;
  FILE* f = fdopen(fd, mode);
  if (!f) close(fd);
  return f;
}

FILE* fopen(const char* path, const char* mode) { return fopen_in_view(path, mode, LIBC(fopen)); }
FILE* fopen64(const char* path, const char* mode) {
  return fopen_in_view(path, mode, LIBC(fopen64));
}

int stat(const char* path, struct stat* st) {
  VIEW_OR_LIBC(stat, stat_in_view(path, true, st), path, st);
}
int stat64(const char* path, struct stat64* st) {
  VIEW_OR_LIBC(stat64, stat_in_view(path, true, as_stat(st)), path, st);
}
int lstat(const char* path, struct stat* st) {
  VIEW_OR_LIBC(lstat, stat_in_view(path, false, st), path, st);
}
int lstat64(const char* path, struct stat64* st) {
  VIEW_OR_LIBC(lstat64, stat_in_view(path, false, as_stat(st)), path, st);
}
int fstatat(int dirfd, const char* path, struct stat* st, int flags) {
  VIEW_OR_LIBC(fstatat, at_in_view(dirfd, path, flags, st), dirfd, path, st, flags);
}
int fstatat64(int dirfd, const char* path, struct stat64* st, int flags) {
  VIEW_OR_LIBC(fstatat64, at_in_view(dirfd, path, flags, as_stat(st)), dirfd, path, st, flags);
}
int fstat(int fd, struct stat* st) { return fstat_fd(fd, st, LIBC(fstat)(fd, st)); }
int fstat64(int fd, struct stat64* st) { return fstat_fd(fd, as_stat(st), LIBC(fstat64)(fd, st)); }

int __xstat(int ver, const char* path, struct stat* st) {
  VIEW_OR_LIBC(__xstat, stat_in_view(path, true, st), ver, path, st);
}
int __xstat64(int ver, const char* path, struct stat64* st) {
  VIEW_OR_LIBC(__xstat64, stat_in_view(path, true, as_stat(st)), ver, path, st);
}
int __lxstat(int ver, const char* path, struct stat* st) {
  VIEW_OR_LIBC(__lxstat, stat_in_view(path, false, st), ver, path, st);
}
int __lxstat64(int ver, const char* path, struct stat64* st) {
  VIEW_OR_LIBC(__lxstat64, stat_in_view(path, false, as_stat(st)), ver, path, st);
}
int __fxstatat(int ver, int dirfd, const char* path, struct stat* st, int flags) {
  VIEW_OR_LIBC(__fxstatat, at_in_view(dirfd, path, flags, st), ver, dirfd, path, st, flags);
}
int __fxstatat64(int ver, int dirfd, const char* path, struct stat64* st, int flags) {
  VIEW_OR_LIBC(__fxstatat64, at_in_view(dirfd, path, flags, as_stat(st)), ver, dirfd, path, st,
               flags);
}
int __fxstat(int ver, int fd, struct stat* st) {
  return fstat_fd(fd, st, LIBC(__fxstat)(ver, fd, st));
}
int __fxstat64(int ver, int fd, struct stat64* st) {
  return fstat_fd(fd, as_stat(st), LIBC(__fxstat64)(ver, fd, st));
}

int statx(int dirfd, const char* path, int flags, unsigned int mask, struct statx* x) {
  bool empty = !path[0] && (flags & AT_EMPTY_PATH);
  if (!empty && !may_be_view_path(path)) return LIBC(statx)(dirfd, path, flags, mask, x);
  struct stat st;
  int rc = at_in_view(dirfd, path, flags, &st);
  if (rc == kHost) return LIBC(statx)(dirfd, path, flags, mask, x);
  if (rc == 0) to_statx(st, x);
  return rc;
}

int access(const char* path, int mode) {
  VIEW_OR_LIBC(access, access_in_view(path, mode), path, mode);
}
int euidaccess(const char* path, int mode) {
  VIEW_OR_LIBC(euidaccess, access_in_view(path, mode), path, mode);
}
int eaccess(const char* path, int mode) {
  VIEW_OR_LIBC(eaccess, access_in_view(path, mode), path, mode);
}
int faccessat(int dirfd, const char* path, int mode, int flags) {
  VIEW_OR_LIBC(faccessat, access_in_view(path, mode), dirfd, path, mode, flags);
}

// Extended attributes: the view's entries have none (ls -l asks for ACLs and security labels).
static int xattr_in_view(const char* path, bool follow, int none) {
  struct stat st;
  int rc = stat_in_view(path, follow, &st);
  return rc == 0 ? (none ? fail(none) : 0) : rc;
}

ssize_t getxattr(const char* path, const char* name, void* value, size_t size) {
  VIEW_OR_LIBC(getxattr, xattr_in_view(path, true, ENODATA), path, name, value, size);
}
ssize_t lgetxattr(const char* path, const char* name, void* value, size_t size) {
  VIEW_OR_LIBC(lgetxattr, xattr_in_view(path, false, ENODATA), path, name, value, size);
}
ssize_t listxattr(const char* path, char* list, size_t size) {
  VIEW_OR_LIBC(listxattr, xattr_in_view(path, true, 0), path, list, size);
}
ssize_t llistxattr(const char* path, char* list, size_t size) {
  VIEW_OR_LIBC(llistxattr, xattr_in_view(path, false, 0), path, list, size);
}

}  // extern "C"
