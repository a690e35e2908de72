// SPDX-License-Identifier: BSD-2-Clause
#include "register_pages.h"

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

RegisterPages* make_pages(EmuContext* ctx) {
  auto* pages = new RegisterPages();
  const uint64_t n_regs = ctx->n_uars + ctx->n_td_uars;
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  pages->ctx = ctx;
  pages->len = (n_regs * sizeof(UarReg) + page - 1) / page * page;
  pages->assembly = new StoreAssembly[n_regs];
  pages->fd = memfd_create("emu-registers", MFD_CLOEXEC);
  void *view = nullptr, *mirror = nullptr;
  if (pages->fd < 0 || ftruncate(pages->fd, off_t(pages->len)) != 0 ||
      mmio::map_trapped_pages(pages->fd, 0, pages->len, &view, &mirror) != 0) {
    if (pages->fd >= 0) close(pages->fd);
    delete[] pages->assembly;
    delete pages;
    return nullptr;
  }
  pages->view = static_cast<uint8_t*>(view);
  pages->mirror = static_cast<uint8_t*>(mirror);
  pages->window = mmio::trap_window_add(view, pages->len, mirror, on_register_store, pages);
  if (pages->window < 0) {
    munmap(view, pages->len);
    munmap(mirror, pages->len);
    close(pages->fd);
    delete[] pages->assembly;
    delete pages;
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
  munmap(pages->view, pages->len);
  munmap(pages->mirror, pages->len);
  close(pages->fd);
  delete[] pages->assembly;
  delete pages;
  ctx->reg_pages = nullptr;
}

}  // namespace emu::prov
