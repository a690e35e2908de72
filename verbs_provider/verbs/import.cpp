// SPDX-License-Identifier: BSD-2-Clause
// Context import (ibv_import_device, ibv_import_pd/mr/dm, ibv_unimport_*) for emu contexts. In the
// kernel a duplicate of a context's command fd names the same uverbs file, so a context imported
// from it sees the same objects by handle. Here a handle is the object's slot in the segment (a
// PD's or MR's) or this process's block number (DM), and an imported context is a new context on
// the same device that remembers the context it was imported from (share_slot): the PDs and MRs
// that context made (and the blocks it allocated) are what ibv_import_* find. Import works
// within the process that holds the original context; a command fd passed to another process
// names a context whose objects live in that process's address space and is refused (EOPNOTSUPP),
// as a kernel without import answers.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "emu/objects.h"
#include "forward.h"
#include "provider.h"

using namespace emu;
using namespace emu::prov;

namespace {

// Whether fd is an emu context's command fd (a memfd named kEmuCmdFdName; the link of a memfd
// reads "/memfd:NAME (deleted)").
bool is_emu_cmd_fd(int fd) {
  char link[64], target[128];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = 0;
  char want[64];
  std::snprintf(want, sizeof want, "/memfd:%s ", kEmuCmdFdName);
  return std::strncmp(target, want, std::strlen(want)) == 0;
}

bool same_file(int a, int b) {
  struct stat sa, sb;
  return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_ino == sb.st_ino &&
         sa.st_dev == sb.st_dev;
}

// This process's open context whose command fd is the file fd names, or nullptr. Found through
// the segment's context slots this process owns (each registered by its uid at open), so that
// opening and closing a context pay nothing for import.
EmuContext* context_of_cmd_fd(int fd) {
  Segment* seg = segment();
  for (const ContextSlot& cs : seg->hdr()->ctxs) {
    if (cs.state.load(std::memory_order_acquire) != kSlotLive || cs.owner != seg->self()) continue;
    auto* c = static_cast<ibv_context*>(registry_find(cs.uid));
    if (c && same_file(c->cmd_fd, fd)) return to_ctx(c);
  }
  return nullptr;
}

}  // namespace

extern "C" {

// The returned context owns cmd_fd (ibv_close_device closes it), as libibverbs' does.
ibv_context* ibv_import_device(int cmd_fd) {
  if (!is_emu_cmd_fd(cmd_fd)) {
    auto fn = REAL(ibv_import_device, "IBVERBS_1.10");
    if (!fn) errno = EOPNOTSUPP;
    return fn ? fn(cmd_fd) : nullptr;
  }
  EmuContext* from = context_of_cmd_fd(cmd_fd);
  if (!from) return fail_null<ibv_context>(EOPNOTSUPP);  // another process's context
  ibv_context* c = open_context(from->vctx.context.device, cmd_fd);
  if (c) to_ctx(c)->share_slot = from->share_slot;
  return c;
}

// A new ibv_pd on the PD `handle` names, if the context it was made on shares with ctx.
ibv_pd* ibv_import_pd(ibv_context* ctx, uint32_t handle) {
  if (!is_emu(ctx)) {
    auto fn = REAL(ibv_import_pd, "IBVERBS_1.10");
    return fn ? fn(ctx, handle) : fail_null<ibv_pd>(EOPNOTSUPP);
  }
  Segment* seg = segment();
  const PdSlot* ps = pd_at(seg->hdr(), handle);
  if (!ps || ps->state.load() != kSlotLive || ps->owner != seg->self() ||
      ps->ctx != to_ctx(ctx)->share_slot)
    return fail_null<ibv_pd>(ENOENT);
  auto* pd = new (std::nothrow) EmuPd();
  if (!pd) return fail_null<ibv_pd>(ENOMEM);
  pd->slot = handle;
  pd->imported = true;
  pd->pd.context = ctx;
  pd->pd.handle = handle;
  return &pd->pd;
}

// A new ibv_mr on the MR `handle` names, if it is on pd's protection domain. Its address is the
// one the MR was registered at (the kernel leaves it NULL; the address is known here).
ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t handle) {
  if (!is_emu(pd->context)) {
    auto fn = REAL(ibv_import_mr, "IBVERBS_1.10");
    return fn ? fn(pd, handle) : fail_null<ibv_mr>(EOPNOTSUPP);
  }
  Segment* seg = segment();
  const MrSlot* ms = mr_at(seg->hdr(), handle);
  if (!ms || ms->state.load() != kSlotLive || ms->owner != seg->self() || ms->mw_type != 0 ||
      ms->pd != to_pd(pd)->slot)
    return fail_null<ibv_mr>(ENOENT);
  auto* mr = new (std::nothrow) EmuMr();
  if (!mr) return fail_null<ibv_mr>(ENOMEM);
  mr->slot = handle;
  mr->imported = true;
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  mr->mr.addr = reinterpret_cast<void*>(ms->addr);
  mr->mr.length = ms->length;
  mr->mr.handle = handle;
  mr->mr.lkey = ms->key;
  mr->mr.rkey = ms->key;
  return &mr->mr;
}

ibv_dm* ibv_import_dm(ibv_context* ctx, uint32_t handle) {
  if (!is_emu(ctx)) {
    auto fn = REAL(ibv_import_dm, "IBVERBS_1.13");
    return fn ? fn(ctx, handle) : fail_null<ibv_dm>(EOPNOTSUPP);
  }
  return emu_import_dm(ctx, handle);
}

// Unimport frees the handle, never the object; on an object that was not imported it does
// nothing (the object stays usable through the handle its maker holds).
void ibv_unimport_pd(ibv_pd* pd) {
  if (!is_emu(pd->context)) {
    if (auto fn = REAL(ibv_unimport_pd, "IBVERBS_1.10")) fn(pd);
    return;
  }
  if (to_pd(pd)->imported) delete to_pd(pd);
}

void ibv_unimport_mr(ibv_mr* mr) {
  if (!is_emu(mr->context)) {
    if (auto fn = REAL(ibv_unimport_mr, "IBVERBS_1.10")) fn(mr);
    return;
  }
  if (to_mr(mr)->imported) delete to_mr(mr);
}

void ibv_unimport_dm(ibv_dm* dm) {
  if (!is_emu(dm->context)) {
    if (auto fn = REAL(ibv_unimport_dm, "IBVERBS_1.13")) fn(dm);
    return;
  }
  emu_unimport_dm(dm);
}

}  // extern "C"
