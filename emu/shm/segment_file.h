// SPDX-License-Identifier: BSD-2-Clause
// The segment file on its tmpfs (docs/design/segment-and-heap.md, "The segment's life and size"):
// linked once laid out, so a creator that dies first leaves nothing; its pages reserved as the
// fabric grows, so a full tmpfs is a failed allocation and never a bus error; one lock ordering the
// attaches, detaches and removals of a fabric.
#pragma once
#include <cstdint>
#include <string>

#include "emu/config.h"
#include "emu/layout.h"
#include "emu/segment.h"
#include "shm/shm_heap.h"

namespace emu {

// The life lock: a write lock on byte 0 of the file owned by its open file description (fcntl
// F_OFD_SETLK), so the kernel drops it with a dead holder's files, and apart from the allocator's
// flock on the same file (the two kinds of lock do not interact). wait: block until it is ours;
// else false if another holds it.
bool life_lock(int fd, bool wait);
void life_unlock(int fd);

// `fd` is the file linked at `path` now: not unlinked, not replaced by a newer one.
bool still_linked(int fd, const std::string& path);

// A file in `dir` with no name yet (O_TMPFILE); -1 with errno.
int create_unnamed(const std::string& dir);
// Gives it the name `path`: 0, or an errno (EEXIST: another creator was first).
int link_unnamed(int fd, const std::string& path);

// Pages for [off, off + len) of the segment file, taken from the tmpfs now. 0 or an errno: ENOSPC
// when the tmpfs (or EMU_SHM_LIMIT, counted over this user's segment files in EMU_SHM_DIR) has no
// room.
int reserve_pages(int fd, uint64_t off, uint64_t len, const Config& cfg);
// The whole pages inside [off, off + len) back to the tmpfs (the range reads as zeros after).
void release_pages(int fd, uint64_t off, uint64_t len);

// The message of a failed reservation: names the directory, the fabric and the size.
std::string no_room_message(const Config& cfg, uint64_t len, int err);

// A process that uses the fabric: registered, not detached, its pid still the original's.
bool proc_uses_fabric(const ProcRecord& r);
// What a fabric's header says about its life, read without attaching (another process may be
// changing it: a snapshot): the processes that use it.
uint32_t live_procs(const Header& h);
// Whether any does: stops at the first (each record costs a read of /proc/<pid>/stat).
bool any_proc_uses_fabric(const Header& h);
// XRC domains kept on purpose (a policy other than the kernel's) and TGT QPs bound to them: what
// outlives every process, and keeps the fabric's segment.
uint32_t kept_objects(const Header& h);
// The header is one this build can read (magic, version, size).
bool layout_matches(const Header& h);

// The heap's pages are the segment file's: reserved before a block is handed out, given back when
// a block of whole pages is freed.
class SegmentBacking final : public HeapBacking {
 public:
  explicit SegmentBacking(Segment* seg) : seg_(seg) {}
  bool reserve(uint64_t off, uint64_t len) override {
    return seg_->reserve(off, len) == Status::ok;
  }
  void release(uint64_t off, uint64_t len) override { seg_->release(off, len); }

 private:
  Segment* seg_;
};

// Between segment.cpp (the process-wide segment) and segment_life.cpp (its attach): the message
// Segment::last_error() returns, and the header lock holders' liveness is read from.
std::string& attach_error();
void publish_header(Header* h);

}  // namespace emu
