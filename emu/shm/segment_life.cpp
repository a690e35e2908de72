// SPDX-License-Identifier: BSD-2-Clause
// The segment's life (docs/design/segment-and-heap.md, "The segment's life and size"): made whole
// under no name and linked only then, attached under the life lock with a check that the file
// mapped is still the one linked, its pages reserved as it grows, removed by its last process
// unless kept.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "emu/fabrics.h"
#include "emu/segment.h"
#include "shm/segment_file.h"
#include "shm/shm_heap.h"

namespace emu {
namespace {

// Each retry follows a removal by another process between our open and our lock: a handful is
// already unlikely.
constexpr int kAttachTries = 64;

uint64_t page_up(uint64_t v) { return (v + 4095) & ~uint64_t(4095); }

// A core dump keeps the header (devices, processes, table directories) and leaves the rest out:
// the kernel dumps a shared mapping of an unlinked file whole (a fabric being made, or removed
// while attached), and reading gigabytes of holes would fill the tmpfs (EMU_SHM_SIZE is 4G).
void leave_heap_out_of_core_dumps(char* base, uint64_t size) {
  const uint64_t header = page_up(sizeof(Header));
  if (size > header) madvise(base + header, size - header, MADV_DONTDUMP);
}

}  // namespace

Status Segment::attach(const Config& cfg) {
  cfg_ = &cfg;
  path_ = cfg.segment_path();
  pid_ = getpid();
  Status st = open_locked();
  if (st != Status::ok) return st;
  publish_header(hdr_);
  if (!layout_matches(*hdr_)) {
    attach_error() =
        "shared segment " + path_ + " has layout version " + std::to_string(hdr_->layout_version) +
        " (header " + std::to_string(hdr_->header_size) + " bytes) but this build uses version " +
        std::to_string(kLayoutVersion) + " (header " + std::to_string(sizeof(Header)) +
        " bytes): it was made by another build. Remove it once no process uses it (emu-ctl rm " +
        cfg.fabric + " --force), or set EMU_FABRIC to another name";
    life_unlock(lock_fd_);
    return Status::layout_mismatch;
  }
  sweep_dead();
  st = register_self();
  if (st == Status::ok && cfg.persist) set_persistent(this, true);
  // Registered (or not): a detach or a removal may judge the fabric now.
  life_unlock(lock_fd_);
  if (st != Status::ok) return st;
  attached_ = true;
  // A fabric whose processes were all killed goes now, whichever fabric comes next.
  remove_unused_fabrics(cfg, cfg.segment_name());
  // Peers read and write our registered memory with process_vm_readv/writev, as a NIC would DMA:
  // allow them where Yama restricts ptrace to descendants.
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  return Status::ok;
}

Status Segment::open_locked() {
  for (int i = 0; i < kAttachTries; ++i) {
    bool retry = false;
    int fd = open(path_.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    Status st;
    if (fd >= 0) {
      st = open_existing(fd, &retry);
    } else if (errno == ENOENT) {
      st = create(&retry);
    } else {
      attach_error() = "cannot open shared segment " + path_ + ": " + std::strerror(errno) +
                       " (set EMU_SHM_DIR to a writable tmpfs)";
      return Status::io;
    }
    if (!retry) return st;
  }
  attach_error() = "shared segment " + path_ + " was removed under every one of " +
                   std::to_string(kAttachTries) + " attaches";
  return Status::busy;
}

// An existing file, locked: still the linked one (a last process may have removed it between our
// open and our lock: then *retry) and laid out (an older build's creator could link it before).
Status Segment::open_existing(int fd, bool* retry) {
  life_lock(fd, true);
  struct stat st;
  if (!still_linked(fd, path_) || fstat(fd, &st) != 0) {
    close(fd);
    *retry = true;
    return Status::busy;
  }
  size_ = static_cast<uint64_t>(st.st_size);
  void* p = size_ >= sizeof(Header)
                ? mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  if (p == MAP_FAILED || static_cast<Header*>(p)->magic == 0) {
    // Nobody attaches without the lock we hold: a creator that died part way, long ago.
    if (p != MAP_FAILED) munmap(p, size_);
    unlink(path_.c_str());
    close(fd);
    *retry = true;
    return Status::busy;
  }
  lock_fd_ = fd;
  base_ = static_cast<char*>(p);
  hdr_ = reinterpret_cast<Header*>(base_);
  leave_heap_out_of_core_dumps(base_, size_);
  return Status::ok;
}

// A new segment, made and laid out under no name and linked only then: a creator that dies or
// fails part way leaves nothing. *retry if another creator linked its segment first.
Status Segment::create(bool* retry) {
  int fd = create_unnamed(cfg_->shm_dir);
  if (fd < 0) {
    attach_error() = "cannot create a shared segment in " + cfg_->shm_dir + ": " +
                     std::strerror(errno) + " (set EMU_SHM_DIR to a writable tmpfs)";
    return Status::io;
  }
  life_lock(fd, true);
  size_ = cfg_->shm_size;
  void* p = ftruncate(fd, static_cast<off_t>(size_)) == 0
                ? mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  if (p == MAP_FAILED) {
    attach_error() =
        "cannot size or map a shared segment in " + cfg_->shm_dir + ": " + std::strerror(errno);
    close(fd);
    return Status::io;
  }
  lock_fd_ = fd;
  base_ = static_cast<char*>(p);
  hdr_ = reinterpret_cast<Header*>(base_);
  leave_heap_out_of_core_dumps(base_, size_);
  Status st = lay_out();
  if (st != Status::ok) {
    unmap_and_close();
    return st;
  }
  int e = link_unnamed(fd, path_);
  if (e == 0) return Status::ok;
  unmap_and_close();
  if (e == EEXIST) {
    *retry = true;
    return Status::busy;
  }
  attach_error() = "cannot name shared segment " + path_ + ": " + std::strerror(e);
  return Status::io;
}

// The header takes its pages now, whole (5.5 MiB, most of it the object tables): a page of a
// MAP_SHARED tmpfs mapping is allocated by the first access, a read included (and a read of a page
// the tmpfs cannot supply is a SIGBUS too), and every table is scanned by some path.
Status Segment::lay_out() {
  if (reserve(0, sizeof(Header)) != Status::ok) return Status::no_memory;
  hdr_->layout_version = kLayoutVersion;
  hdr_->header_size = sizeof(Header);
  hdr_->segment_size = size_;
  hdr_->next_uid.store(1);
  SegmentBacking backing(this);
  if (!ShmHeap::init(base_, &hdr_->heap, page_up(sizeof(Header)), size_, &backing))
    return Status::no_memory;
  init_devices(*cfg_);
  hdr_->magic = kMagic;
  return Status::ok;
}

Status Segment::register_self() {
  // Until it has a process record, this process holds locks under its pid (so a waiter can tell
  // whether it died).
  const uint32_t attaching = kMaxProcs + static_cast<uint32_t>(pid_);
  ShmLockGuard g(hdr_->table_lock, attaching);
  uint32_t i = 0;
  for (; i < kMaxProcs; ++i)
    if (hdr_->procs[i].state.load() == kProcFree) break;
  if (i == kMaxProcs) {
    attach_error() = "too many processes attached to " + path_;
    return Status::no_memory;
  }
  hdr_->procs[i].pid = pid_;
  hdr_->procs[i].start_time = proc_start_time(pid_);
  hdr_->procs[i].detached.store(0);
  hdr_->procs[i].state.store(kProcAlive);
  self_ = i;
  return Status::ok;
}

void Segment::unmap_and_close() {
  munmap(base_, size_);
  close(lock_fd_);
  base_ = nullptr;
  hdr_ = nullptr;
  lock_fd_ = -1;
}

Status Segment::reserve(uint64_t off, uint64_t len) {
  int e = reserve_pages(lock_fd_, off, len, *cfg_);
  if (e == 0) return Status::ok;
  std::string msg = no_room_message(*cfg_, len, e);
  if (attached_)
    std::fprintf(stderr, "rdmaemu: %s\n", msg.c_str());
  else
    attach_error() = msg;
  return Status::no_memory;
}

void Segment::detach_at_exit() {
  // A forked child that never attached runs its parent's exit handlers: the record is not its.
  if (getpid() != pid_ || !hdr_) return;
  life_lock(lock_fd_, true);
  // Two last processes exiting together each see the other's pid alive: the one that detaches
  // first marks itself, so the second sees it gone and removes the file.
  hdr_->procs[self_].detached.store(1);
  // Another user first: it ends the test at the first live record (not last: the usual case at
  // 64 processes), before kept_objects reads the whole QP table.
  if (still_linked(lock_fd_, path_) && hdr_->persistent.load() == 0 &&
      !any_proc_uses_fabric(*hdr_) && kept_objects(*hdr_) == 0) {
    // Our objects go with the file; the mapping stays valid for the threads still running.
    unlink(path_.c_str());
  }
  life_unlock(lock_fd_);
}

}  // namespace emu
