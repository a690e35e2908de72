// SPDX-License-Identifier: BSD-2-Clause
// Directory streams, links and realpath of the file view (file_view.h). A directory of the view
// lists the host's entries (when the host has it: /sys/class/infiniband with a real device) and
// then ours, taken as one snapshot at opendir. Streams of the view come from a fixed pool, so that
// readdir on any other stream costs one address comparison.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "file_view.h"

extern "C" char* __realpath_chk(const char*, char*, size_t);
extern "C" ssize_t __readlink_chk(const char*, char*, size_t, size_t);

static_assert(sizeof(dirent) == sizeof(dirent64), "one entry layout serves both (x86_64)");

namespace emu::prov::view {
namespace {

// A slot is claimed with one compare-and-swap and given back with a store: no lock, so that the
// scan libibverbs makes of /sys/class/infiniband_verbs in every ibv_get_device_list adds no
// scheduling point to a scheduled run (libemu_sched makes every mutex one).
struct ViewDir {
  std::vector<dirent64> entries;
  size_t next = 0;
  std::atomic<bool> used{false};
};
constexpr int kViewDirs = 32;
// Built on first use and never destroyed (docs/design/verbs-provider.md, "Exit"): a directory read
// may run on one thread while another thread's exit() runs this library's static destructors.
ViewDir* view_dirs() {
  static auto* dirs = new ViewDir[kViewDirs];
  return dirs;
}

ViewDir* view_dir(DIR* d) {
  auto* p = reinterpret_cast<ViewDir*>(d);
  return p >= view_dirs() && p < view_dirs() + kViewDirs ? p : nullptr;
}

void add_entry(std::vector<dirent64>& v, const char* name, unsigned char type,
               const std::string& dir) {
  for (const dirent64& e : v)
    if (std::strcmp(e.d_name, name) == 0) return;  // the host's entry of that name stays
  dirent64 e;
  std::memset(&e, 0, sizeof e);
  e.d_ino = std::hash<std::string>{}(dir + "/" + name) | 1;
  e.d_off = static_cast<off64_t>(v.size() + 1);
  e.d_reclen = sizeof e;
  e.d_type = type;
  std::snprintf(e.d_name, sizeof e.d_name, "%s", name);
  v.push_back(e);
}

// The entries of a view directory: ".", "..", the host's, ours.
std::vector<dirent64> snapshot(const Node& n, const char* path) {
  std::vector<dirent64> v;
  add_entry(v, ".", DT_DIR, n.path);
  add_entry(v, "..", DT_DIR, n.path);
  if (n.may_exist_for_real())
    if (DIR* real = LIBC(opendir)(path)) {
      while (dirent64* e = LIBC(readdir64)(real)) add_entry(v, e->d_name, e->d_type, n.path);
      LIBC(closedir)(real);
    }
  for (const Entry& e : children(n)) add_entry(v, e.name.c_str(), e.type, n.path);
  return v;
}

ssize_t link_in_view(const char* path, char* buf, size_t size, bool* host) {
  *host = false;
  if (!may_be_view_path(path)) return *host = true, 0;
  Lookup l = lookup(path, false);
  if (l.where == Where::host) return *host = true, 0;
  if (l.where == Where::redirected) return LIBC(readlink)(l.host_path.c_str(), buf, size);
  if (l.err) return errno = l.err, -1;
  if (l.node.kind() != Kind::symlink) return errno = EINVAL, -1;
  std::string t = link_target(l.node);
  size_t n = std::min(size, t.size());  // readlink truncates silently and adds no terminator
  std::memcpy(buf, t.data(), n);
  return static_cast<ssize_t>(n);
}

char* realpath_in_view(const char* path, char* resolved, bool* host) {
  *host = false;
  if (!may_be_view_path(path)) return *host = true, nullptr;
  Lookup l = lookup(path, true);
  if (l.where == Where::host) return *host = true, nullptr;
  if (l.where == Where::redirected) return LIBC(realpath)(l.host_path.c_str(), resolved);
  if (l.err) return errno = l.err, nullptr;
  if (l.node.path.size() >= PATH_MAX) return errno = ENAMETOOLONG, nullptr;
  if (!resolved) return strdup(l.node.path.c_str());
  std::memcpy(resolved, l.node.path.c_str(), l.node.path.size() + 1);
  return resolved;
}

}  // namespace
}  // namespace emu::prov::view

using namespace emu::prov::view;

extern "C" {

DIR* opendir(const char* path) {
  if (!may_be_view_path(path)) return LIBC(opendir)(path);
  Lookup l = lookup(path, true);
  if (l.where == Where::host) return LIBC(opendir)(path);
  if (l.where == Where::redirected) return LIBC(opendir)(l.host_path.c_str());
  if (l.err) return errno = l.err, nullptr;
  if (l.node.kind() != Kind::dir) return errno = ENOTDIR, nullptr;
  std::vector<dirent64> entries = snapshot(l.node, path);
  for (ViewDir* d = view_dirs(); d != view_dirs() + kViewDirs; ++d) {
    bool free_slot = false;
    if (!d->used.compare_exchange_strong(free_slot, true, std::memory_order_acquire)) continue;
    d->entries = std::move(entries);
    d->next = 0;
    return reinterpret_cast<DIR*>(d);
  }
  errno = EMFILE;
  return nullptr;
}

dirent64* readdir64(DIR* dir) {
  ViewDir* d = view_dir(dir);
  if (!d) return LIBC(readdir64)(dir);
  return d->next < d->entries.size() ? &d->entries[d->next++] : nullptr;
}

dirent* readdir(DIR* dir) {
  ViewDir* d = view_dir(dir);
  if (!d) return LIBC(readdir)(dir);
  return reinterpret_cast<dirent*>(readdir64(dir));
}

// Deprecated in glibc, yet UCX's libucs lists directories with readdir_r.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
int readdir64_r(DIR* dir, dirent64* entry, dirent64** result) {
  if (!view_dir(dir)) return LIBC(readdir64_r)(dir, entry, result);
  dirent64* e = readdir64(dir);
  if (e) std::memcpy(entry, e, sizeof *e);
  *result = e ? entry : nullptr;
  return 0;
}

int readdir_r(DIR* dir, dirent* entry, dirent** result) {
  if (!view_dir(dir)) return LIBC(readdir_r)(dir, entry, result);
  return readdir64_r(dir, reinterpret_cast<dirent64*>(entry), reinterpret_cast<dirent64**>(result));
}
#pragma GCC diagnostic pop

int closedir(DIR* dir) {
  ViewDir* d = view_dir(dir);
  if (!d) return LIBC(closedir)(dir);
  d->entries.clear();
  d->used.store(false, std::memory_order_release);
  return 0;
}

void rewinddir(DIR* dir) {
  if (ViewDir* d = view_dir(dir))
    d->next = 0;
  else
    LIBC(rewinddir)(dir);
}

long telldir(DIR* dir) {
  ViewDir* d = view_dir(dir);
  return d ? static_cast<long>(d->next) : LIBC(telldir)(dir);
}

void seekdir(DIR* dir, long pos) {
  if (ViewDir* d = view_dir(dir))
    d->next = static_cast<size_t>(pos);
  else
    LIBC(seekdir)(dir, pos);
}

// A stream of the view has no descriptor (its entries are a snapshot, not a kernel directory).
int dirfd(DIR* dir) {
  if (!view_dir(dir)) return LIBC(dirfd)(dir);
  errno = ENOTSUP;
  return -1;
}

// glibc's scandir opens the directory inside libc, past opendir: a path that may be the view's
// goes through the interposed stream functions instead (libfabric imports scandir).
int scandir64(const char* path, dirent64*** list, int (*keep)(const dirent64*),
              int (*order)(const dirent64**, const dirent64**)) {
  if (!may_be_view_path(path)) return LIBC(scandir64)(path, list, keep, order);
  DIR* dir = opendir(path);
  if (!dir) return -1;
  std::vector<dirent64*> out;
  while (dirent64* e = readdir64(dir)) {
    if (keep && !keep(e)) continue;
    auto* copy = static_cast<dirent64*>(malloc(sizeof *e));
    if (!copy) break;
    out.push_back(static_cast<dirent64*>(std::memcpy(copy, e, sizeof *e)));
  }
  closedir(dir);
  *list = static_cast<dirent64**>(malloc(std::max<size_t>(out.size(), 1) * sizeof(dirent64*)));
  if (!*list) {
    for (dirent64* e : out) free(e);
    return errno = ENOMEM, -1;
  }
  std::copy(out.begin(), out.end(), *list);
  using Cmp = int (*)(const void*, const void*);
  if (order) qsort(*list, out.size(), sizeof(dirent64*), reinterpret_cast<Cmp>(order));
  return static_cast<int>(out.size());
}

int scandir(const char* path, dirent*** list, int (*keep)(const dirent*),
            int (*order)(const dirent**, const dirent**)) {
  if (!may_be_view_path(path)) return LIBC(scandir)(path, list, keep, order);
  using Keep = int (*)(const dirent64*);
  using Order = int (*)(const dirent64**, const dirent64**);
  return scandir64(path, reinterpret_cast<dirent64***>(list), reinterpret_cast<Keep>(keep),
                   reinterpret_cast<Order>(order));
}

ssize_t readlink(const char* path, char* buf, size_t size) {
  bool host;
  ssize_t n = link_in_view(path, buf, size, &host);
  return host ? LIBC(readlink)(path, buf, size) : n;
}

ssize_t readlinkat(int dirfd, const char* path, char* buf, size_t size) {
  bool host;
  ssize_t n = link_in_view(path, buf, size, &host);
  return host ? LIBC(readlinkat)(dirfd, path, buf, size) : n;
}

ssize_t __readlink_chk(const char* path, char* buf, size_t size, size_t buflen) {
  bool host;
  ssize_t n = link_in_view(path, buf, std::min(size, buflen), &host);
  return host ? LIBC(__readlink_chk)(path, buf, size, buflen) : n;
}

char* realpath(const char* path, char* resolved) {
  bool host;
  char* r = realpath_in_view(path, resolved, &host);
  return host ? LIBC(realpath)(path, resolved) : r;
}

char* __realpath_chk(const char* path, char* resolved, size_t resolvedlen) {
  bool host;
  char* r = realpath_in_view(path, resolved, &host);
  return host ? LIBC(__realpath_chk)(path, resolved, resolvedlen) : r;
}

char* canonicalize_file_name(const char* path) {
  bool host;
  char* r = realpath_in_view(path, nullptr, &host);
  return host ? LIBC(canonicalize_file_name)(path) : r;
}

}  // extern "C"
