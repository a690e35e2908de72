// SPDX-License-Identifier: BSD-2-Clause
#include "register_pages.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <mutex>

#include "emu/config.h"
#include "emu/device.h"
#include "emu/sched/sched.h"
#include "mmio/mmio_trap.h"
#include "provider.h"

namespace emu::prov {
namespace {

namespace sched = emu::sched;

constexpr uint32_t kDbAt = offsetof(UarReg, doorbell);
constexpr uint32_t kBfAt = offsetof(UarReg, bf);
static_assert(kMlx5BfRegSize == 2 * kBfBufSize);
static_assert(kMlx5BfOffset + kMlx5BfRegsPerPage * kMlx5BfRegSize == kMlx5UarPage);

uint64_t regs_of(const EmuContext* ctx) { return ctx->n_uars + ctx->n_td_uars; }

// Under EMU_SCHEDULE every store to a register is a scheduling point of the thread that made it,
// whoever's code it is (UCX's BlueFlame copy is a run of such stores): the schedule decides what
// the other threads do between two of them. The point's value is where in the program the store
// came from (mmio::store_site; the run's report names the function). One thread-local load
// outside a run.
void store_point(uint64_t offset) {
  if (sched::scheduled()) sched::point(sched::kPointMmioStore, offset, mmio::store_site());
}

// The trap's report of a completed store in emu's layout: to the registers it covers (a store may
// span two).
void on_register_store(void* cookie, uint64_t offset, const uint8_t* stored, uint32_t bytes) {
  auto* pages = static_cast<RegisterPages*>(cookie);
  EmuContext* ctx = pages->ctx;
  store_point(offset);
  const uint64_t start = offset;
  for (uint64_t end = offset + bytes; offset < end;) {
    uint64_t idx = offset / sizeof(UarReg), at = offset % sizeof(UarReg);
    uint64_t piece = sizeof(UarReg) - at < end - offset ? sizeof(UarReg) - at : end - offset;
    if (idx >= regs_of(ctx)) return;  // the page's tail past the last register: nothing there
    mmio_plain_store(ctx->uars[idx], pages->assembly[idx], pages->mirror + idx * sizeof(UarReg),
                     stored + (offset - start), uint32_t(at), uint32_t(piece));
    offset += piece;
  }
}

// mlx5's layout: a store of `len` bytes (`from`) at byte `in` of a page, below the BlueFlame
// registers. Only the CQ doorbell means anything there (as on a NIC, writes to unused register
// space are dropped). A store of the whole word rings with its own bytes (threads arming CQs
// through one page at once each arm theirs); one assembled from parts, with the page's.
void cq_doorbell_store(RegisterPages* pages, uint64_t page, const uint8_t* from, uint32_t in,
                       uint32_t len) {
  uint32_t lo = in > kMlx5CqDoorbell ? in : kMlx5CqDoorbell;
  uint32_t hi = in + len < kMlx5CqDoorbell + 8 ? in + len : kMlx5CqDoorbell + 8;
  if (lo >= hi) return;
  if (!mmio_word_complete(pages->cq_doorbell[page], lo - kMlx5CqDoorbell, hi - kMlx5CqDoorbell))
    return;
  const bool whole = lo == kMlx5CqDoorbell && hi == kMlx5CqDoorbell + 8;
  const uint8_t* word =
      whole ? from + (kMlx5CqDoorbell - in) : pages->mirror + page * kMlx5UarPage + kMlx5CqDoorbell;
  uint64_t value;
  std::memcpy(&value, word, sizeof value);
  device_cq_doorbell(pages->ctx->slot, value);
}

// mlx5's layout: a store into BlueFlame register idx at byte `at` of its 512 (two halves). The
// bytes go where UarReg keeps that half; an 8-byte store at a half's start is also the doorbell
// (mlx5 drivers ring it there; the device cannot tell it from a BlueFlame write's first 8 bytes
// until more arrive, so it rings, and a write that goes on reaches the buffer as well).
void bf_register_store(RegisterPages* pages, uint32_t idx, const uint8_t* from, uint32_t at,
                       uint32_t len, bool whole_store) {
  UarReg& reg = pages->ctx->uars[idx];
  uint8_t* bytes = pages->reg_bytes + size_t(idx) * sizeof(UarReg);
  std::memcpy(bytes + kBfAt + at, from, len);
  bool doorbell = whole_store && len == 8 && at % kBfBufSize == 0;
  if (doorbell) {
    std::memcpy(bytes + kDbAt, from, 8);
    mmio_plain_store(reg, pages->assembly[idx], bytes, from, kDbAt, 8);
  }
  // (The doorbell's 8 bytes count for the half's first chunk under no writer: a BlueFlame write
  // of 8-byte stores completes it; another thread's later write there tears nothing.)
  mmio_plain_store(reg, pages->assembly[idx], bytes, from, kBfAt + at, len, doorbell);
}

void on_mlx5_store(void* cookie, uint64_t offset, const uint8_t* stored, uint32_t bytes) {
  auto* pages = static_cast<RegisterPages*>(cookie);
  store_point(offset);
  const uint64_t n_regs = regs_of(pages->ctx);
  const bool whole = bytes == 8;
  const uint64_t start = offset;
  for (uint64_t end = offset + bytes; offset < end;) {
    uint64_t page = offset / kMlx5UarPage;
    uint32_t in = uint32_t(offset % kMlx5UarPage);
    uint64_t left = end - offset;
    if (in < kMlx5BfOffset) {
      uint32_t piece = uint32_t(left < kMlx5BfOffset - in ? left : kMlx5BfOffset - in);
      cq_doorbell_store(pages, page, stored + (offset - start), in, piece);
      offset += piece;
      continue;
    }
    uint32_t k = (in - kMlx5BfOffset) / kMlx5BfRegSize, at = (in - kMlx5BfOffset) % kMlx5BfRegSize;
    uint32_t piece = uint32_t(left < kMlx5BfRegSize - at ? left : kMlx5BfRegSize - at);
    uint64_t idx = page * kMlx5BfRegsPerPage + k;
    if (idx < n_regs)
      bf_register_store(pages, uint32_t(idx), stored + (offset - start), at, piece, whole);
    offset += piece;
  }
}

void free_pages(RegisterPages* pages) {
  if (pages->view) munmap(pages->view, pages->len);
  if (pages->mirror) munmap(pages->mirror, pages->len);
  delete[] pages->assembly;
  delete[] pages->reg_bytes;
  delete[] pages->cq_doorbell;
  delete pages;
}

uint64_t round_to_pages(uint64_t bytes) {
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

// emu's layout. The view is the segment's own register pages, read-only: a read shows what the
// device holds (the last doorbell, the BlueFlame buffers as it received them, whoever wrote
// them). The stores' side is a scratch copy of the process's own: the trap completes each store
// there, and the device takes the stored bytes from it, so no store reaches the device's
// bookkeeping beside the registers (or the heap past the array's last page) except through the
// assembly.
bool map_emu_layout(RegisterPages* pages) {
  EmuContext* ctx = pages->ctx;
  const uint64_t uar_off = segment()->offset_of(ctx->uars);  // page-aligned (create_ctx)
  pages->len = round_to_pages(regs_of(ctx) * sizeof(UarReg));
  if (uar_off % uint64_t(sysconf(_SC_PAGESIZE))) return false;
  int fd = open(config().segment_path().c_str(), O_RDONLY | O_CLOEXEC);
  void* view =
      fd < 0 ? MAP_FAILED : mmap(nullptr, pages->len, PROT_READ, MAP_SHARED, fd, off_t(uar_off));
  if (fd >= 0) close(fd);
  pages->view = view == MAP_FAILED ? nullptr : static_cast<uint8_t*>(view);
  return pages->view != nullptr;
}

// mlx5's layout: pages of the process's own, read-only, as many as the registers need.
bool map_mlx5_layout(RegisterPages* pages) {
  const uint64_t n_pages = (regs_of(pages->ctx) + kMlx5BfRegsPerPage - 1) / kMlx5BfRegsPerPage;
  pages->len = round_to_pages(n_pages * kMlx5UarPage);
  pages->mlx5 = true;
  pages->reg_bytes = new uint8_t[regs_of(pages->ctx) * sizeof(UarReg)]();
  pages->cq_doorbell = new StoreAssembly[pages->len / kMlx5UarPage];
  void* view = mmap(nullptr, pages->len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  pages->view = view == MAP_FAILED ? nullptr : static_cast<uint8_t*>(view);
  return pages->view != nullptr;
}

RegisterPages* make_pages(EmuContext* ctx) {
  auto* pages = new RegisterPages();
  pages->ctx = ctx;
  pages->assembly = new StoreAssembly[regs_of(ctx)];
  bool mlx5 = config().personality_mlx5;
  bool mapped = mlx5 ? map_mlx5_layout(pages) : map_emu_layout(pages);
  void* mirror =
      mapped ? mmap(nullptr, pages->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
             : MAP_FAILED;
  pages->mirror = mirror == MAP_FAILED ? nullptr : static_cast<uint8_t*>(mirror);
  if (!pages->mirror) {
    free_pages(pages);
    return nullptr;
  }
  pages->window = mmio::trap_window_add(pages->view, pages->len, pages->mirror,
                                        mlx5 ? on_mlx5_store : on_register_store, pages);
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
  RegisterPages* pages = register_pages(ctx);
  if (!pages) return reinterpret_cast<uint8_t*>(&ctx->uars[idx]) + at;
  if (!pages->mlx5) return pages->view + idx * sizeof(UarReg) + at;
  return mlx5_bf_register(ctx, idx) + (at >= kBfAt ? at - kBfAt : 0);
}

uint8_t* mlx5_uar_page(EmuContext* ctx, uint32_t idx) {
  RegisterPages* pages = register_pages(ctx);
  if (!pages || !pages->mlx5) return nullptr;
  return pages->view + size_t(idx / kMlx5BfRegsPerPage) * kMlx5UarPage;
}

uint8_t* mlx5_bf_register(EmuContext* ctx, uint32_t idx) {
  uint8_t* page = mlx5_uar_page(ctx, idx);
  return page ? page + kMlx5BfOffset + (idx % kMlx5BfRegsPerPage) * kMlx5BfRegSize : nullptr;
}

void register_pages_close(EmuContext* ctx) {
  RegisterPages* pages = ctx->reg_pages;
  if (!pages) return;
  mmio::trap_window_remove(pages->window);
  free_pages(pages);
  ctx->reg_pages = nullptr;
}

}  // namespace emu::prov
