// SPDX-License-Identifier: BSD-2-Clause
// The fabrics of this user in EMU_SHM_DIR, seen from outside: each is one segment file
// (rdmaemu-<uid>-<fabric>), removed by its last process to detach unless something keeps it
// (docs/design/segment-and-heap.md, "The shared segment"). emu-ctl fabrics / rm / persist act
// through these.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "emu/config.h"
#include "emu/segment.h"
#include "emu/status.h"

namespace emu {

struct FabricInfo {
  std::string name;  // EMU_FABRIC
  std::string path;
  uint64_t size = 0;      // bytes mapped: the most the segment can grow to (EMU_SHM_SIZE)
  uint64_t reserved = 0;  // bytes of tmpfs it holds now
  bool readable = false;  // laid out by this build (else the counts below are unknown)
  uint32_t live_procs = 0;
  uint32_t kept_objects = 0;  // XRC domains (policy xrcd/creator) and their TGT QPs
  bool persistent = false;
};

// Every segment file of this user in cfg.shm_dir, by name.
std::vector<FabricInfo> list_fabrics(const Config& cfg);

// Removes `fabric`'s segment file. busy (with *why) if a process is attached and !force, or if
// the file is from another build and !force; not_found if there is none. A process still attached
// keeps its mapping; the next process to attach makes a new segment.
Status remove_fabric(const Config& cfg, const std::string& fabric, bool force, std::string* why);

// Removes every segment file of this user in cfg.shm_dir but `except` (a file name) that no live
// process uses, nothing keeps and nobody is attaching or detaching; files left by a creator of an
// older build (too short to hold a header, or never laid out) too. Returns how many went. Run at
// every attach, so that a fabric whose processes were all killed goes at the next attach of any.
int remove_unused_fabrics(const Config& cfg, const std::string& except);

// The fabric stays when no process is attached (on), or goes with its last process (off).
void set_persistent(Segment* seg, bool on);

}  // namespace emu
