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

}  // namespace emu::prov
