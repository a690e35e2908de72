// SPDX-License-Identifier: BSD-2-Clause
// The x86-64 instructions a program may store to a device register with, decoded far enough to
// complete the store for it (mmio_trap.h): which register or immediate holds the value, how wide
// the store is, and how its address is formed. Only stores to memory are decoded: a MOV from a
// general register or an immediate, MOVNTI, MOVBE, the string stores (MOVS, STOS, with REP), and
// the vector stores of SSE, AVX and AVX-512 (MOVUPS/MOVDQU/MOVNTDQ/MOVQ/MOVD/PEXTR*/VEXTRACT* and
// their VEX and EVEX forms, masked or not), which is what compilers and glibc's memcpy/memmove emit
// for a copy into a register page. Anything else is kNone: the fault is then not one this
// emulation can complete (the caller says so and lets the program's own handling decide).
#pragma once
#include <cstdint>

namespace emu::mmio {

// General registers by their x86 encoding number (RAX 0 ... RDI 7, R8 8 ... R15 15).
constexpr int8_t kNoReg = -1;
constexpr int8_t kRegRip = 16;  // RIP-relative addressing: the base is the next instruction

struct StoreInsn {
  enum Kind : uint8_t {
    kNone,    // not a store this decoder knows
    kGpr,     // MOV/MOVNTI/MOVBE r/m, reg: the value is general register `src`
    kImm,     // MOV r/m, imm: the value is `imm`
    kString,  // MOVS (from [RSI]) or STOS (from RAX) to [RDI], `rep` times RCX
    kVector,  // from an XMM/YMM/ZMM (or MMX) register: the CPU has to make the store itself
  };
  Kind kind = kNone;
  uint8_t width = 0;     // bytes stored (kString: per element)
  uint8_t length = 0;    // bytes of the instruction (all kinds but kVector, where it is not needed)
  int8_t base = kNoReg;  // address = base + index * scale + disp (kString: [RDI])
  int8_t index = kNoReg;
  uint8_t scale = 1;
  int32_t disp = 0;  // EVEX's compressed disp8 already multiplied out
  int8_t src = kNoReg;
  bool src_high8 = false;    // kGpr: AH, CH, DH or BH (a byte store without REX, reg 4-7)
  bool byte_swap = false;    // MOVBE: stored big-endian
  bool from_memory = false;  // kString: MOVS (else STOS)
  bool rep = false;          // kString: REP prefix
  uint64_t imm = 0;          // kImm, sign-extended as the CPU extends it
};

// Decodes the instruction at code (up to 15 bytes are read, never past the instruction's end).
StoreInsn decode_store(const uint8_t* code);

}  // namespace emu::mmio
