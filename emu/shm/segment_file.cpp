// SPDX-License-Identifier: BSD-2-Clause
#include "shm/segment_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "emu/segment.h"  // pid_matches

namespace emu {
namespace {

constexpr uint64_t kPage = 4096;

int ofd_lock(int fd, short type, bool wait) {
  struct flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  int r;
  while ((r = fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl)) != 0 && errno == EINTR) {
  }
  return r;
}

// Bytes of tmpfs this user's segment files in the directory hold (EMU_SHM_LIMIT's count).
uint64_t dir_usage(const Config& cfg) {
  DIR* d = opendir(cfg.shm_dir.c_str());
  if (!d) return 0;
  std::string prefix = "rdmaemu-" + std::to_string(getuid()) + "-";
  uint64_t total = 0;
  while (dirent* e = readdir(d)) {
    struct stat st;
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
      total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  closedir(d);
  return total;
}

}  // namespace

bool life_lock(int fd, bool wait) { return ofd_lock(fd, F_WRLCK, wait) == 0; }
void life_unlock(int fd) { ofd_lock(fd, F_UNLCK, false); }

bool still_linked(int fd, const std::string& path) {
  struct stat mine, named;
  if (fstat(fd, &mine) != 0 || mine.st_nlink == 0) return false;
  if (stat(path.c_str(), &named) != 0) return false;
  return mine.st_dev == named.st_dev && mine.st_ino == named.st_ino;
}

int create_unnamed(const std::string& dir) {
  return open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
}

int link_unnamed(int fd, const std::string& path) {
  // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH on older kernels; the /proc link works for anyone.
  if (linkat(fd, "", AT_FDCWD, path.c_str(), AT_EMPTY_PATH) == 0) return 0;
  if (errno == EEXIST) return EEXIST;
  std::string self = "/proc/self/fd/" + std::to_string(fd);
  if (linkat(AT_FDCWD, self.c_str(), AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) == 0) return 0;
  return errno;
}

int reserve_pages(int fd, uint64_t off, uint64_t len, const Config& cfg) {
  uint64_t first = off & ~(kPage - 1);
  uint64_t end = (off + len + kPage - 1) & ~(kPage - 1);
  if (cfg.shm_limit) {
    // A segment still being made has no name yet: its own pages count besides the directory's.
    struct stat st;
    uint64_t unnamed = fstat(fd, &st) == 0 && st.st_nlink == 0 ? uint64_t(st.st_blocks) * 512 : 0;
    if (dir_usage(cfg) + unnamed + (end - first) > cfg.shm_limit) return ENOSPC;
  }
  // Mode 0 with KEEP_SIZE: pages taken now, the file's size (the mapping's) unchanged.
  if (fallocate(fd, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(first),
                static_cast<off_t>(end - first)) == 0)
    return 0;
  return errno;
}

void release_pages(int fd, uint64_t off, uint64_t len) {
  uint64_t first = (off + kPage - 1) & ~(kPage - 1);
  uint64_t end = (off + len) & ~(kPage - 1);
  if (end > first)
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(first),
              static_cast<off_t>(end - first));
}

std::string no_room_message(const Config& cfg, uint64_t len, int err) {
  std::string limit =
      cfg.shm_limit ? " (EMU_SHM_LIMIT=" + std::to_string(cfg.shm_limit >> 10) + "K)" : "";
  return "no room for " + std::to_string((len + 1023) >> 10) + " KiB more of fabric '" +
         cfg.fabric + "' in EMU_SHM_DIR=" + cfg.shm_dir + limit + ": " + std::strerror(err) +
         " (free space there, remove unused fabrics with emu-ctl rm, or set EMU_SHM_DIR)";
}

bool proc_uses_fabric(const ProcRecord& r) {
  return r.state.load(std::memory_order_acquire) == kProcAlive && r.detached.load() == 0 &&
         pid_matches(r.pid, r.start_time);
}

uint32_t live_procs(const Header& h) {
  uint32_t n = 0;
  for (const ProcRecord& r : h.procs) n += proc_uses_fabric(r);
  return n;
}

bool any_proc_uses_fabric(const Header& h) {
  for (const ProcRecord& r : h.procs)
    if (proc_uses_fabric(r)) return true;
  return false;
}

uint32_t kept_objects(const Header& h) {
  auto kept = [&h](uint32_t x) {
    return x < kMaxXrcds && h.xrcds[x].state.load(std::memory_order_acquire) == kSlotLive &&
           h.xrcds[x].policy != kXrcPolicyKernel;
  };
  uint32_t n = 0;
  for (uint32_t x = 0; x < kMaxXrcds; ++x) n += kept(x);
  each_qp(&h, [&](const QpSlot& q) {
    if (q.state.load(std::memory_order_acquire) == kSlotLive && q.type == kQptXrcRecv &&
        q.xrcd_ref != 0 && kept(q.xrcd_ref - 1))
      ++n;
  });
  return n;
}

bool layout_matches(const Header& h) {
  return h.magic == kMagic && h.layout_version == kLayoutVersion && h.header_size == sizeof(Header);
}

}  // namespace emu
