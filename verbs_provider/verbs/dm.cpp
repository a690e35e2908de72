// SPDX-License-Identifier: BSD-2-Clause
// Device memory (ibv_alloc_dm): memory "on the device" that the host reaches with
// ibv_memcpy_to_dm / ibv_memcpy_from_dm and that MRs made with ibv_reg_dm_mr let QPs use, zero
// based. An emu device's memory is memory the device reaches, so a device-memory block is a block
// of the allocating process's memory (aligned as asked), reached by the engine as any registered
// memory is; max_dm_size bounds each block (EMU devices have no shared pool to exhaust).
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "provider.h"

namespace emu::prov {

namespace {

struct EmuDm {
  ibv_dm dm;
  uint8_t* mem = nullptr;
  uint64_t length = 0;
  std::atomic<uint32_t> mrs{0};  // MRs on it: ibv_free_dm is EBUSY meanwhile
  EmuDm* origin = nullptr;       // ibv_import_dm: the block this handle names (its mrs count)
};

EmuDm* to_dm(ibv_dm* dm) { return reinterpret_cast<EmuDm*>(dm); }

// This process's blocks by handle, for ibv_import_dm (slow path only).
std::mutex g_blocks_mu;
std::unordered_map<uint32_t, EmuDm*>&
dm_blocks() {  // never destroyed (docs/design/verbs-provider.md, "Exit")
  static auto* blocks = new std::unordered_map<uint32_t, EmuDm*>;
  return *blocks;
}
uint32_t g_next_handle = 1;

// mlx5's rule for the host copies: offset and length in 4-byte units, inside the block.
bool copy_ok(const EmuDm* d, uint64_t offset, size_t length) {
  return offset % 4 == 0 && length % 4 == 0 && offset <= d->length && length <= d->length - offset;
}

int copy_to(ibv_dm* dm, uint64_t offset, const void* host, size_t length) {
  EmuDm* d = to_dm(dm);
  if (!copy_ok(d, offset, length)) return EINVAL;
  std::memcpy(d->mem + offset, host, length);
  return 0;
}

int copy_from(void* host, ibv_dm* dm, uint64_t offset, size_t length) {
  EmuDm* d = to_dm(dm);
  if (!copy_ok(d, offset, length)) return EINVAL;
  std::memcpy(host, d->mem + offset, length);
  return 0;
}

}  // namespace

uint8_t* dm_memory(ibv_dm* dm, uint64_t* length) {
  *length = to_dm(dm)->length;
  return to_dm(dm)->mem;
}

ibv_dm* emu_alloc_dm(ibv_context* ctx, ibv_alloc_dm_attr* attr) {
  if (!attr || attr->comp_mask) return fail_null<ibv_dm>(EINVAL);
  if (!attr->length || attr->length > kEmuMaxDmSize) return fail_null<ibv_dm>(ENOMEM);
  if (attr->log_align_req > 20) return fail_null<ibv_dm>(EINVAL);
  size_t align = std::max<size_t>(size_t{64}, size_t{1} << attr->log_align_req);
  size_t len = (attr->length + align - 1) / align * align;
  auto* d = new (std::nothrow) EmuDm();
  void* mem = d ? std::aligned_alloc(align, len) : nullptr;
  if (!mem) {
    delete d;
    return fail_null<ibv_dm>(ENOMEM);
  }
  std::memset(mem, 0, len);
  d->mem = static_cast<uint8_t*>(mem);
  d->length = attr->length;
  d->dm.context = ctx;
  d->dm.memcpy_to_dm = copy_to;
  d->dm.memcpy_from_dm = copy_from;
  std::lock_guard<std::mutex> g(g_blocks_mu);
  d->dm.handle = g_next_handle++;
  dm_blocks()[d->dm.handle] = d;
  return &d->dm;
}

int emu_free_dm(ibv_dm* dm) {
  EmuDm* d = to_dm(dm);
  if (d->origin) return emu_unimport_dm(dm), 0;  // the block stays with its allocator's handle
  if (d->mrs.load()) return EBUSY;
  {
    std::lock_guard<std::mutex> g(g_blocks_mu);
    dm_blocks().erase(d->dm.handle);
  }
  std::free(d->mem);
  delete d;
  return 0;
}

// Another handle on a block of a context that shares objects with ctx (same share_slot): it
// copies to and from the same memory; MRs on it count against the block.
ibv_dm* emu_import_dm(ibv_context* ctx, uint32_t handle) {
  std::lock_guard<std::mutex> g(g_blocks_mu);
  auto it = dm_blocks().find(handle);
  if (it == dm_blocks().end() ||
      to_ctx(it->second->dm.context)->share_slot != to_ctx(ctx)->share_slot)
    return fail_null<ibv_dm>(ENOENT);
  auto* d = new (std::nothrow) EmuDm();
  if (!d) return fail_null<ibv_dm>(ENOMEM);
  *static_cast<ibv_dm*>(&d->dm) = it->second->dm;
  d->dm.context = ctx;
  d->mem = it->second->mem;
  d->length = it->second->length;
  d->origin = it->second;
  return &d->dm;
}

void emu_unimport_dm(ibv_dm* dm) {
  if (to_dm(dm)->origin) delete to_dm(dm);
}

ibv_mr* emu_reg_dm_mr(ibv_pd* pd, ibv_dm* dm, uint64_t offset, size_t length, unsigned access) {
  EmuDm* d = to_dm(dm);
  // Device memory is addressed from its start: MRs on it must be zero based (as mlx5 requires).
  if (!(access & IBV_ACCESS_ZERO_BASED) || dm->context != pd->context || offset > d->length ||
      length > d->length - offset)
    return fail_null<ibv_mr>(EINVAL);
  ibv_mr* mr = reg_mr(pd, d->mem + offset, length, 0, access, /*device_memory=*/true);
  if (!mr) return nullptr;
  EmuDm* block = d->origin ? d->origin : d;
  to_mr(mr)->dm_refs = &block->mrs;
  block->mrs.fetch_add(1);
  return mr;
}

}  // namespace emu::prov
