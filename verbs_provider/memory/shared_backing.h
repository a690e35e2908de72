// SPDX-License-Identifier: BSD-2-Clause
// Finding the file behind a shared mapping, so that a registration over it can be reached by
// engines in other processes without re-backing anything (shared_backing.cpp).
#pragma once
#include <sys/types.h>

#include <cstdint>

namespace emu::prov {

// The mapping that holds an address, when it maps a file (inode != 0).
struct Vma {
  uint64_t start, end;
  uint64_t offset;  // file offset of start
  uint64_t inode;
  dev_t dev;
  bool shared_rw;  // MAP_SHARED, readable and writable
  char name[256];  // the path /proc/self/maps shows
};

// The file-backed mapping containing addr, if any.
bool vma_at(uint64_t addr, Vma* v);
// A new read-write descriptor of v's file (close-on-exec), or -1 if none can be had.
int open_backing(const Vma& v);

// In a child of fork(): the maps file opened so far shows the parent's address space.
void forget_maps_file();

// One line of /proc/self/maps, as the registration file's bookkeeping needs it (shared_mr.cpp).
struct Mapping {
  uint64_t start, end;
  uint64_t offset;
  uint64_t inode;
  dev_t dev;
  bool rw;          // readable and writable
  bool shared;      // MAP_SHARED
  bool plain_anon;  // no file: heap, an anonymous mmap (a thread's stack too), not [stack]
};
// The mappings overlapping [lo, hi), in address order, into out (at most max); their number, or
// -1 if the maps could not be read or there were more than max.
int mappings_in(uint64_t lo, uint64_t hi, Mapping* out, int max);

}  // namespace emu::prov
