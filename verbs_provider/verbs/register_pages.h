// SPDX-License-Identifier: BSD-2-Clause
// A context's doorbell registers as the program maps them, trapped: a mapping without write
// permission, so that a plain store is an MMIO exit (mmio/mmio_trap.h), completed into a scratch
// mirror of the process's own from which the device takes the stored bytes (emu/mmio.h's
// mmio_plain_store). Made at the first handout of a register in the context (EMU_MMIO=trap, the
// default); under EMU_MMIO=call the registers handed out are the segment's own, which the device
// reads only through the emudv_* calls. Two layouts:
// - emu's (emudv_init_qp's uar.db and uar.bf): the segment's pages of the context's UarReg array,
//   register i at i * sizeof(UarReg), so that a read shows what the device holds;
// - mlx5's, under the mlx5 personality (mlx5dv_init_obj): pages laid out as a ConnectX's UAR
//   pages, each with its CQ doorbell at 0x20 and four BlueFlame registers of two 256-byte halves
//   from 0x800. An 8-byte store at a half's start is the QP doorbell; the bytes of a BlueFlame
//   write land in the register's buffers. Reads show zeros (a NIC's BlueFlame reads are not data).
#pragma once
#include <cstdint>

#include "emu/mmio.h"

namespace emu::prov {

struct EmuContext;

// mlx5's UAR page (libmlx5's layout of a 4 KiB UAR).
constexpr uint32_t kMlx5UarPage = 4096;
constexpr uint32_t kMlx5CqDoorbell = 0x20;  // 8 bytes: a CQ's arm request
constexpr uint32_t kMlx5BfOffset = 0x800;   // the first BlueFlame register
constexpr uint32_t kMlx5BfRegSize = 0x200;  // two halves of kBfBufSize
constexpr uint32_t kMlx5BfRegsPerPage = 4;

struct RegisterPages {
  uint8_t* view = nullptr;    // what the program stores into, read-only
  uint8_t* mirror = nullptr;  // the scratch the trap completes stores into, laid out as the view
  uint64_t len = 0;
  int window = -1;                    // the trap's handle
  StoreAssembly* assembly = nullptr;  // per register
  EmuContext* ctx = nullptr;
  bool mlx5 = false;  // mlx5's layout
  // mlx5's layout: each register's bytes as UarReg lays them out (what the assembly reads), and
  // each page's CQ doorbell word.
  uint8_t* reg_bytes = nullptr;
  StoreAssembly* cq_doorbell = nullptr;
};

// The context's register pages, made on first use; nullptr under EMU_MMIO=call or if they could
// not be made (then the segment's registers are handed out, as under EMU_MMIO=call). The layout is
// mlx5's under the mlx5 personality.
RegisterPages* register_pages(EmuContext* ctx);
// Where the program finds register idx's byte `at` of UarReg's layout: the doorbell, the
// BlueFlame buffers (in mlx5's layout the doorbell is the start of the first half).
uint8_t* register_address(EmuContext* ctx, uint32_t idx, uint32_t at);
// mlx5's layout: the page holding register idx (a CQ's cq_uar: page 0), and register idx's
// BlueFlame register (mlx5dv_qp's bf.reg). nullptr without trapped pages in that layout.
uint8_t* mlx5_uar_page(EmuContext* ctx, uint32_t idx);
uint8_t* mlx5_bf_register(EmuContext* ctx, uint32_t idx);
// At context close: stores to the pages fault as the program's own from here on.
void register_pages_close(EmuContext* ctx);

}  // namespace emu::prov
