// SPDX-License-Identifier: BSD-2-Clause
#include "register_pages.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mutex>

#include "emu/config.h"
#include "mmio/mmio_trap.h"
#include "provider.h"

namespace emu::prov {
namespace {

// The trap's report of a completed store: to the registers it covers (a store may span two).
void on_register_store(void* cookie, uint64_t offset, uint32_t bytes) {
  auto* pages = static_cast<RegisterPages*>(cookie);
  EmuContext* ctx = pages->ctx;
  const uint64_t n_regs = ctx->n_uars + ctx->n_td_uars;
  for (uint64_t end = offset + bytes; offset < end;) {
    uint64_t idx = offset / sizeof(UarReg), at = offset % sizeof(UarReg);
    uint64_t piece = sizeof(UarReg) - at < end - offset ? sizeof(UarReg) - at : end - offset;
    if (idx >= n_regs) return;  // the page's tail past the last register: nothing there
    mmio_plain_store(ctx->uars[idx], pages->assembly[idx], pages->mirror + idx * sizeof(UarReg),
                     uint32_t(at), uint32_t(piece));
    offset += piece;
  }
}

void free_pages(RegisterPages* pages) {
  if (pages->view) munmap(pages->view, pages->len);
  if (pages->mirror) munmap(pages->mirror, pages->len);
  delete[] pages->assembly;
  delete pages;
}

// The view is the segment's own register pages, read-only: a read shows what the device holds
// (the last doorbell, the BlueFlame buffers as it received them, whoever wrote them). The stores'
// side is a scratch copy of the process's own: the trap completes each store there, and the
// device takes the stored bytes from it, so no store reaches the device's bookkeeping beside the
// registers (or the heap past the array's last page) except through the assembly.
RegisterPages* make_pages(EmuContext* ctx) {
  auto* pages = new RegisterPages();
  const uint64_t n_regs = ctx->n_uars + ctx->n_td_uars;
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  const uint64_t uar_off = segment()->offset_of(ctx->uars);  // page-aligned (create_ctx)
  pages->ctx = ctx;
  pages->len = (n_regs * sizeof(UarReg) + page - 1) / page * page;
  pages->assembly = new StoreAssembly[n_regs];
  int fd = open(config().segment_path().c_str(), O_RDONLY | O_CLOEXEC);
  void* view =
      fd < 0 ? MAP_FAILED : mmap(nullptr, pages->len, PROT_READ, MAP_SHARED, fd, off_t(uar_off));
  if (fd >= 0) close(fd);
  void* mirror =
      mmap(nullptr, pages->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  pages->view = view == MAP_FAILED ? nullptr : static_cast<uint8_t*>(view);
  pages->mirror = mirror == MAP_FAILED ? nullptr : static_cast<uint8_t*>(mirror);
  if (uar_off % page || !pages->view || !pages->mirror) {
    free_pages(pages);
    return nullptr;
  }
  pages->window = mmio::trap_window_add(view, pages->len, mirror, on_register_store, pages);
  if (pages->window < 0) {
    free_pages(pages);
    return nullptr;
  }
  return pages;
}

}  // namespace

RegisterPages* register_pages(EmuContext* ctx) {
  if (!config().mmio_trap) return nullptr;
  std::lock_guard<std::mutex> g(ctx->mu);
  if (!ctx->reg_pages) ctx->reg_pages = make_pages(ctx);
  return ctx->reg_pages;
}

uint8_t* register_address(EmuContext* ctx, uint32_t idx, uint32_t at) {
  if (RegisterPages* pages = register_pages(ctx)) return pages->view + idx * sizeof(UarReg) + at;
  return reinterpret_cast<uint8_t*>(&ctx->uars[idx]) + at;
}

void register_pages_close(EmuContext* ctx) {
  RegisterPages* pages = ctx->reg_pages;
  if (!pages) return;
  mmio::trap_window_remove(pages->window);
  free_pages(pages);
  ctx->reg_pages = nullptr;
}

}  // namespace emu::prov
