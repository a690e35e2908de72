// SPDX-License-Identifier: BSD-2-Clause
#include "emu/fabrics.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "shm/segment_file.h"

namespace emu {
namespace {

std::string prefix() { return "rdmaemu-" + std::to_string(getuid()) + "-"; }

// A segment file opened and its header mapped read-only (holes read as zeros: nothing is taken
// from the tmpfs). hdr is null when the file is too short to hold a header.
// The whole file is mapped, not only the Header: the object tables live in heap chunks past it
// (kept_objects reads the QP chunks). Read-only and untouched beyond what is read, so the mapping
// costs no tmpfs page that the segment does not already hold.
struct Peek {
  int fd = -1;
  struct stat st = {};
  const Header* hdr = nullptr;
  size_t mapped = 0;

  bool open_at(const std::string& path) {
    fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 || fstat(fd, &st) != 0) return false;
    if (static_cast<uint64_t>(st.st_size) < sizeof(Header)) return true;
    void* p = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      hdr = static_cast<const Header*>(p);
      mapped = static_cast<size_t>(st.st_size);
    }
    return true;
  }
  ~Peek() {
    if (hdr) munmap(const_cast<Header*>(hdr), mapped);
    if (fd >= 0) close(fd);
  }
};

std::vector<std::string> segment_names(const Config& cfg) {
  std::vector<std::string> names;
  DIR* d = opendir(cfg.shm_dir.c_str());
  if (!d) return names;
  std::string p = prefix();
  while (dirent* e = readdir(d))
    if (std::strncmp(e->d_name, p.c_str(), p.size()) == 0 && e->d_name[p.size()])
      names.emplace_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::vector<FabricInfo> list_fabrics(const Config& cfg) {
  std::vector<FabricInfo> out;
  for (const std::string& name : segment_names(cfg)) {
    FabricInfo f;
    f.name = name.substr(prefix().size());
    f.path = cfg.shm_dir + "/" + name;
    Peek pk;
    if (!pk.open_at(f.path)) continue;  // removed meanwhile
    f.size = static_cast<uint64_t>(pk.st.st_size);
    f.reserved = static_cast<uint64_t>(pk.st.st_blocks) * 512;
    if (pk.hdr && layout_matches(*pk.hdr)) {
      f.readable = true;
      f.live_procs = live_procs(*pk.hdr);
      f.kept_objects = kept_objects(*pk.hdr);
      f.persistent = pk.hdr->persistent.load() != 0;
    }
    out.push_back(f);
  }
  return out;
}

Status remove_fabric(const Config& cfg, const std::string& fabric, bool force, std::string* why) {
  std::string path = cfg.shm_dir + "/" + prefix() + fabric;
  Peek pk;
  if (!pk.open_at(path)) {
    *why = "no segment " + path + ": " + std::strerror(errno);
    return Status::not_found;
  }
  // Waits out an attach or detach in progress: what it leaves is what is judged.
  life_lock(pk.fd, true);
  if (!still_linked(pk.fd, path)) return Status::ok;  // its last process removed it meanwhile
  if (!force) {
    if (pk.hdr && pk.hdr->magic != 0 && !layout_matches(*pk.hdr)) {
      *why = path + " was made by another build of rdmaemu: --force removes it";
      return Status::busy;
    }
    if (uint32_t n = pk.hdr && layout_matches(*pk.hdr) ? live_procs(*pk.hdr) : 0) {
      *why = "fabric '" + fabric + "' has " + std::to_string(n) +
             " live process(es) attached: --force removes it anyway (they keep their mapping)";
      return Status::busy;
    }
  }
  if (unlink(path.c_str()) != 0) {
    *why = "cannot remove " + path + ": " + std::strerror(errno);
    return Status::io;
  }
  return Status::ok;
}

int remove_unused_fabrics(const Config& cfg, const std::string& except) {
  int removed = 0;
  for (const std::string& name : segment_names(cfg)) {
    if (name == except) continue;
    std::string path = cfg.shm_dir + "/" + name;
    Peek pk;
    // Busy: a process is attaching or detaching (it decides). Not linked: removed meanwhile.
    if (!pk.open_at(path) || !life_lock(pk.fd, false) || !still_linked(pk.fd, path)) continue;
    bool unused;
    if (!pk.hdr || pk.hdr->magic == 0)
      unused = true;  // a creator of an older build died before laying it out
    else if (!layout_matches(*pk.hdr))
      unused = false;  // another build's: its layout cannot be read (emu-ctl rm --force)
    else
      unused =
          live_procs(*pk.hdr) == 0 && kept_objects(*pk.hdr) == 0 && pk.hdr->persistent.load() == 0;
    if (unused && unlink(path.c_str()) == 0) ++removed;
  }
  return removed;
}

void set_persistent(Segment* seg, bool on) {
  seg->hdr()->persistent.store(on ? 1 : 0, std::memory_order_release);
}

}  // namespace emu
