// SPDX-License-Identifier: BSD-2-Clause
// Protection domains and memory regions.
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "emu/inject.h"
#include "emu/objects.h"
#include "emu/reclaim.h"
#include "forward.h"
#include "provider.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace emu;
using namespace emu::prov;

namespace {

constexpr unsigned kKnownAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
    IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND |
    IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING;

// 0, or the errno an MR's access flags get.
int check_access(unsigned access) {
  // The remote-write and atomic rights need local write, as ibv_reg_mr(3) says.
  if ((access & ~kKnownAccess & ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE)) ||
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
       !(access & IBV_ACCESS_LOCAL_WRITE)))
    return EINVAL;
  return 0;
}

// Whether every page of [addr, addr + length) is mapped: what the kernel's pinning finds out
// (EFAULT) when an MR is not on-demand. The engine copies its own process's memory directly, so
// an MR over a hole would be a SIGSEGV at the first WR instead of the registration's error.
// msync(MS_ASYNC) writes nothing back; it fails with ENOMEM where part of the range is unmapped.
bool range_mapped(const void* addr, size_t length) {
  constexpr uintptr_t kPage = 4096;
  uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  uintptr_t first = a & ~(kPage - 1);
  if (a + length < a) return false;
  return msync(reinterpret_cast<void*>(first), a + length - first, MS_ASYNC) == 0;
}

}  // namespace

namespace emu::prov {

ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access,
               bool device_memory) {
  if (int err = check_access(access)) return fail_null<ibv_mr>(err);
  // On-demand paging is what this device does anyway: the engine reads and writes a process's
  // memory through its page tables (process_vm_readv/writev or a shared mapping), never pinning
  // it, so a page not yet present is faulted in by the copy. ON_DEMAND only keeps the pages from
  // moving into the registration file (EMU_SHARED_MR, memory/shared_mr.cpp), and allows the
  // implicit MR: addr NULL and length SIZE_MAX, the whole address space, as the kernel takes it.
  bool odp = access & IBV_ACCESS_ON_DEMAND;
  bool implicit = odp && !addr && length == SIZE_MAX;
  // A device-memory MR may be empty (mlx5 takes one); host memory has to have a byte.
  if (!implicit && ((length == 0 && !device_memory) || length > Limits::max_mr_size || !addr))
    return fail_null<ibv_mr>(EINVAL);
  if (implicit && iova) return fail_null<ibv_mr>(EINVAL);
  if (int err = inject_verb_check(segment(), kVerbRegMr)) return fail_null<ibv_mr>(err);
  if (!odp && !device_memory && !range_mapped(addr, length)) return fail_null<ibv_mr>(EFAULT);
  auto* mr = new (std::nothrow) EmuMr();
  if (!mr) return fail_null<ibv_mr>(ENOMEM);
  MrSpec spec{to_pd(pd)->slot, access, reinterpret_cast<uint64_t>(addr), length,
              (access & IBV_ACCESS_ZERO_BASED) ? 0 : iova};
  Segment* seg = segment();
  reap_dead_windows(seg);
  uint32_t slot;
  if (create_mr(seg, spec, &slot) != Status::ok) {
    delete mr;
    return fail_null<ibv_mr>(ENOMEM);
  }
  MrSlot& ms = mr_slot(seg->hdr(), slot);
  mr->cover = share_pages(addr, length, odp, ms);  // ODP: share_len stays 0, no shared window
  mr->slot = slot;
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  mr->mr.addr = addr;
  mr->mr.length = length;
  mr->mr.handle = slot;
  mr->mr.lkey = ms.key;
  mr->mr.rkey = ms.key;
  return &mr->mr;
}

// ibv_advise_mr: prefetch advice over ranges of on-demand MRs of this PD. The device faults pages
// in as it copies, so there is nothing to fetch ahead; what is checked is what the kernel checks
// (a known advice and flag, each range inside an ODP MR of this PD that allows the access).
int emu_advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
                  uint32_t num_sge) {
  if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
      advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
    return EOPNOTSUPP;
  if (flags & ~static_cast<uint32_t>(IBV_ADVISE_MR_FLAG_FLUSH)) return EOPNOTSUPP;
  if (!num_sge || !sg_list) return EINVAL;
  Segment* seg = segment();
  for (uint32_t i = 0; i < num_sge; ++i) {
    const MrSlot* mr = seg->find_mr(sg_list[i].lkey);
    if (!mr || mr->pd != to_pd(pd)->slot || !(mr->access & IBV_ACCESS_ON_DEMAND)) return EINVAL;
    if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE && !(mr->access & IBV_ACCESS_LOCAL_WRITE))
      return EINVAL;
    uint64_t a = sg_list[i].addr, len = sg_list[i].length;
    if (a < mr->addr || len > mr->length || a - mr->addr > mr->length - len) return EINVAL;
  }
  return 0;
}

}  // namespace emu::prov

extern "C" {

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  if (!is_emu(context)) {
    auto fn = REAL(ibv_alloc_pd, "IBVERBS_1.1");
    return fn ? fn(context) : fail_null<ibv_pd>(EINVAL);
  }
  if (int err = inject_verb_check(segment(), kVerbAllocPd)) return fail_null<ibv_pd>(err);
  auto* pd = new (std::nothrow) EmuPd();
  if (!pd) return fail_null<ibv_pd>(ENOMEM);
  uint32_t slot;
  if (create_pd(segment(), to_ctx(context)->dev, to_ctx(context)->slot, &slot) != Status::ok) {
    delete pd;
    return fail_null<ibv_pd>(ENOMEM);
  }
  pd->slot = slot;
  pd->pd.context = context;
  pd->pd.handle = slot;
  return &pd->pd;
}

int ibv_dealloc_pd(ibv_pd* pd) {
  if (!is_emu(pd->context)) {
    auto fn = REAL(ibv_dealloc_pd, "IBVERBS_1.1");
    return fn ? fn(pd) : EINVAL;
  }
  // A parent domain goes as mlx5's does: EBUSY while its QPs and CQs are there; the protection
  // domain it names stays.
  if (to_pd(pd)->is_parent()) return dealloc_parent_domain(to_pd(pd));
  if (to_pd(pd)->refs.load()) return EBUSY;  // parent domains made on it (mlx5's refcount)
  Header* h = segment()->hdr();
  uint32_t slot = to_pd(pd)->slot;
  // The kernel refuses while MRs or QPs still use the PD.
  bool busy = false;
  auto uses = [&](const auto& o) {
    busy = busy || (o.state.load() == kSlotLive && o.pd == slot && o.owner == segment()->self());
  };
  each_mr(h, uses);
  each_qp(h, uses);
  if (busy) return EBUSY;
  retire_pd(pd_slot(h, slot));
  delete to_pd(pd);
  return 0;
}

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  if (!is_emu(pd->context)) {
    auto fn = REAL(ibv_reg_mr, "IBVERBS_1.1");
    return fn ? fn(pd, addr, length, access) : fail_null<ibv_mr>(EINVAL);
  }
  return reg_mr(pd, addr, length, reinterpret_cast<uint64_t>(addr), static_cast<unsigned>(access));
}

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  if (!is_emu(pd->context)) {
    auto fn = REAL(ibv_reg_mr_iova, "IBVERBS_1.7");
    return fn ? fn(pd, addr, length, iova, access) : fail_null<ibv_mr>(EINVAL);
  }
  return reg_mr(pd, addr, length, iova, static_cast<unsigned>(access));
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                         unsigned int access) {
  if (!is_emu(pd->context)) {
    auto fn = REAL(ibv_reg_mr_iova2, "IBVERBS_1.8");
    return fn ? fn(pd, addr, length, iova, access) : fail_null<ibv_mr>(EINVAL);
  }
  return reg_mr(pd, addr, length, iova, access);
}

ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                          int access) {
  if (!is_emu(pd->context)) {
    auto fn = REAL(ibv_reg_dmabuf_mr, "IBVERBS_1.12");
    return fn ? fn(pd, offset, length, iova, fd, access) : fail_null<ibv_mr>(EINVAL);
  }
  return fail_null<ibv_mr>(EOPNOTSUPP);
}

int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  if (!is_emu(mr->context)) {
    auto fn = REAL(ibv_rereg_mr, "IBVERBS_1.1");
    return fn ? fn(mr, flags, pd, addr, length, access) : IBV_REREG_MR_ERR_INPUT;
  }
  constexpr int kKnownFlags =
      IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
  auto input_error = [](int err) {
    errno = err;
    return IBV_REREG_MR_ERR_INPUT;
  };
  if (!flags || (flags & ~kKnownFlags)) return input_error(EINVAL);
  if (inherited(to_mr(mr))) return input_error(EPERM);
  Segment* seg = segment();
  MrSlot& ms = mr_slot(seg->hdr(), to_mr(mr)->slot);
  MrSpec spec{ms.pd, ms.access, ms.addr, ms.length, ms.iova};
  if (flags & IBV_REREG_MR_CHANGE_PD) {
    if (!pd || pd->context != mr->context) return input_error(EINVAL);
    spec.pd = to_pd(pd)->slot;
  }
  if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
    if (int err = check_access(static_cast<unsigned>(access))) return input_error(err);
    spec.access = static_cast<uint32_t>(access);
  }
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
    if (!addr || !length || length > Limits::max_mr_size) return input_error(EINVAL);
    if (!(spec.access & IBV_ACCESS_ON_DEMAND) && !range_mapped(addr, length))
      return input_error(EFAULT);
    spec.addr = reinterpret_cast<uint64_t>(addr);
    spec.length = length;
    spec.iova = spec.addr;
  }
  if (spec.access & IBV_ACCESS_ZERO_BASED) spec.iova = 0;
  // Other pages, or on-demand paging turned on or off: the shared window is found anew and set
  // while no engine can use the slot (an ODP MR follows the page tables, never a window).
  bool odp = spec.access & IBV_ACCESS_ON_DEMAND;
  bool reshare = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ||
                 odp != static_cast<bool>(ms.access & IBV_ACCESS_ON_DEMAND);
  MrCover old_cover = to_mr(mr)->cover;
  MrSlot share{};
  if (reshare)
    to_mr(mr)->cover = share_pages(reinterpret_cast<void*>(spec.addr), spec.length, odp, share);
  // The keys stay: what a peer was told still names the region.
  rereg_mr(seg, ms, spec, reshare ? &share : nullptr);
  if (reshare) unshare_pages(old_cover);
  if (flags & IBV_REREG_MR_CHANGE_PD) mr->pd = pd;
  mr->addr = reinterpret_cast<void*>(spec.addr);
  mr->length = spec.length;
  return 0;
}

int ibv_dereg_mr(ibv_mr* mr) {
  if (!is_emu(mr->context)) {
    auto fn = REAL(ibv_dereg_mr, "IBVERBS_1.1");
    return fn ? fn(mr) : EINVAL;
  }
  if (inherited(to_mr(mr))) return EPERM;
  // As hardware guarantees: once dereg returns, no DMA touches the memory any more.
  MrSlot& ms = mr_slot(segment()->hdr(), to_mr(mr)->slot);
  retire_mr(segment(), ms);
  unshare_pages(to_mr(mr)->cover);
  if (to_mr(mr)->dm_refs) to_mr(mr)->dm_refs->fetch_sub(1);
  delete to_mr(mr);
  return 0;
}

}  // extern "C"
