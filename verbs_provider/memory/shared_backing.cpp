// SPDX-License-Identifier: BSD-2-Clause
// Memory that is already shared: a region inside one MAP_SHARED, read-write mapping of a file
// (POSIX shm in /dev/shm, a memfd, a tmpfs or disk file, SysV shm, MAP_SHARED|MAP_ANONYMOUS). Such
// pages need no re-backing for an engine in another process to map them: it is enough to keep an fd
// of the file here, which the engine opens as /proc/<owner>/fd/<fd> (the ptrace access process_vm_*
// needs anyway). Registration is the slow path, but a program may register often: the mapping is
// found with one PROCMAP_QUERY ioctl (Linux 6.11+, a tree lookup), and only on older kernels by
// reading /proc/self/maps up to the region.
#include "shared_backing.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "verbs/provider.h"

namespace emu::prov {
namespace {

// The kernel's PROCMAP_QUERY interface (include/uapi/linux/fs.h), for headers that predate it.
struct ProcmapQuery {
  uint64_t size;
  uint64_t query_flags;
  uint64_t query_addr;
  uint64_t vma_start;
  uint64_t vma_end;
  uint64_t vma_flags;
  uint64_t vma_page_size;
  uint64_t vma_offset;
  uint64_t inode;
  uint32_t dev_major;
  uint32_t dev_minor;
  uint32_t vma_name_size;
  uint32_t build_id_size;
  uint64_t vma_name_addr;
  uint64_t build_id_addr;
};
constexpr unsigned long kProcmapQuery = _IOWR('f', 17, ProcmapQuery);
constexpr uint64_t kVmaRead = 1, kVmaWrite = 2, kVmaShared = 8;
constexpr uint64_t kQueryFileBacked = 0x20;

// /proc/self/maps, opened once: opening it costs more than the query. A child of fork() opens its
// own (the inherited one names the parent's address space), and one the program closed behind our
// back (its number reused) is noticed by its identity.
struct MapsFile {
  int fd = -1;
  dev_t dev = 0;
  ino_t ino = 0;
};
MapsFile g_maps;  // under shared_mr.cpp's lock

}  // namespace

void forget_maps_file() {
  if (g_maps.fd >= 0) close(g_maps.fd);
  g_maps.fd = -1;
}

namespace {

int maps_fd() {
  static const bool handler = [] {
    return pthread_atfork(nullptr, nullptr, forget_maps_file) == 0;
  }();
  (void)handler;
  struct stat st;
  if (g_maps.fd >= 0 && fstat(g_maps.fd, &st) == 0 && st.st_dev == g_maps.dev &&
      st.st_ino == g_maps.ino)
    return g_maps.fd;
  g_maps.fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (g_maps.fd >= 0 && fstat(g_maps.fd, &st) == 0) {
    g_maps.dev = st.st_dev;
    g_maps.ino = st.st_ino;
  }
  return g_maps.fd;
}

bool query_ioctl(int fd, uint64_t addr, Vma* v, bool* unsupported) {
  ProcmapQuery q{};
  q.size = sizeof q;
  q.query_flags = kQueryFileBacked;
  q.query_addr = addr;
  q.vma_name_size = sizeof v->name;
  q.vma_name_addr = reinterpret_cast<uint64_t>(v->name);
  if (ioctl(fd, kProcmapQuery, &q) != 0) {
    *unsupported = errno == ENOTTY || errno == EINVAL;
    return false;
  }
  v->start = q.vma_start;
  v->end = q.vma_end;
  v->offset = q.vma_offset;
  v->inode = q.inode;
  v->dev = makedev(q.dev_major, q.dev_minor);
  v->shared_rw =
      (q.vma_flags & (kVmaRead | kVmaWrite | kVmaShared)) == (kVmaRead | kVmaWrite | kVmaShared);
  return q.vma_start <= addr && addr < q.vma_end;
}

// The fallback: the maps file is sorted by address, so reading stops at the region.
bool query_text(int fd, uint64_t addr, Vma* v) {
  FILE* f = fdopen(dup(fd), "r");
  if (!f) return false;
  char line[512];
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f)) {
    unsigned long lo, hi, off, inode;
    unsigned maj, min;
    char perms[8];
    v->name[0] = 0;
    if (std::sscanf(line, "%lx-%lx %7s %lx %x:%x %lu %255[^\n]", &lo, &hi, perms, &off, &maj, &min,
                    &inode, v->name) < 7)
      continue;
    if (lo > addr) break;
    if (addr >= hi) continue;
    found = inode != 0;
    *v = {lo,
          hi,
          off,
          inode,
          makedev(maj, min),
          perms[0] == 'r' && perms[1] == 'w' && perms[3] == 's',
          {}};
    std::sscanf(line, "%*s %*s %*s %*s %*s %255[^\n]", v->name);
  }
  std::fclose(f);
  return found;
}

bool same_file(int fd, const Vma& v) {
  struct stat st;
  return fstat(fd, &st) == 0 && st.st_ino == v.inode && st.st_dev == v.dev;
}

int open_checked(const char* path, const Vma& v) {
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd >= 0 && !same_file(fd, v)) {
    close(fd);
    fd = -1;
  }
  return fd;
}

// A descriptor the program holds on the file (a memfd, or a shm object already unlinked), opened
// anew so that the program may close its own. Costs one stat per open descriptor.
int open_from_fds(const Vma& v) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int fd = -1;
  char path[300];
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    struct stat st;
    if (stat(path, &st) != 0 || st.st_ino != v.inode || st.st_dev != v.dev) continue;
    fd = open_checked(path, v);
    if (fd >= 0) break;
  }
  closedir(d);
  return fd;
}

}  // namespace

bool vma_at(uint64_t addr, Vma* v) {
  int fd = maps_fd();
  if (fd < 0) return false;
  bool unsupported = false;
  bool found = query_ioctl(fd, addr, v, &unsupported);
  if (!found && unsupported) {
    lseek(fd, 0, SEEK_SET);
    found = query_text(fd, addr, v);
  }
  return found;
}

int mappings_in(uint64_t lo, uint64_t hi, Mapping* out, int max) {
  int fd = maps_fd();
  if (fd < 0 || lseek(fd, 0, SEEK_SET) != 0) return -1;
  FILE* f = fdopen(dup(fd), "r");
  if (!f) return -1;
  char line[512];
  int n = 0;
  while (std::fgets(line, sizeof line, f)) {
    unsigned long start, end, off, inode;
    unsigned maj, min;
    char perms[8], name[256] = "";
    if (std::sscanf(line, "%lx-%lx %7s %lx %x:%x %lu %255[^\n]", &start, &end, perms, &off, &maj,
                    &min, &inode, name) < 7)
      continue;
    if (start >= hi) break;  // sorted by address
    if (end <= lo) continue;
    if (n == max) {
      n = -1;
      break;
    }
    bool anon_name =
        name[0] == 0 || std::strcmp(name, "[heap]") == 0 || std::strncmp(name, "[anon", 5) == 0;
    out[n++] = {start,
                end,
                off,
                inode,
                makedev(maj, min),
                perms[0] == 'r' && perms[1] == 'w',
                perms[3] == 's',
                inode == 0 && anon_name};
  }
  std::fclose(f);
  return n;
}

int open_backing(const Vma& v) {
  char path[96];
  // The mapping itself (needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE): reaches every kind,
  // a shared anonymous mapping and SysV shm included.
  std::snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx",
                static_cast<unsigned long>(v.start), static_cast<unsigned long>(v.end));
  int fd = open_checked(path, v);
  if (fd >= 0) return fd;
  // A file still linked where the mapping names it.
  const char* deleted = std::strstr(v.name, " (deleted)");
  if (v.name[0] == '/' && !deleted) {
    fd = open_checked(v.name, v);
    if (fd >= 0) return fd;
  }
  // No descriptor can name a shared anonymous mapping or a SysV segment.
  if (std::strncmp(v.name, "/dev/zero", 9) == 0 || std::strncmp(v.name, "/SYSV", 5) == 0) return -1;
  return open_from_fds(v);
}

}  // namespace emu::prov
