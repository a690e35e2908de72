// SPDX-License-Identifier: BSD-2-Clause
// Encodings from the Intel SDM, volume 2 (legacy prefixes, REX, VEX, EVEX, ModRM/SIB).
#include "store_decode.h"

namespace emu::mmio {
namespace {

struct Prefixes {
  bool op16 = false, rep = false, repne = false, unsupported = false;
  uint8_t rex = 0;
};

// What the opcode bytes after the prefixes say, for the vector table.
struct Opcode {
  int map = 0;  // 0 one-byte, 1 0F, 2 0F38, 3 0F3A
  uint8_t op = 0;
  int pp = 0;  // mandatory prefix: 0 none, 1 66, 2 F3, 3 F2
  bool w = false;
  int vl = 16;         // vector length in bytes (VEX.L, EVEX.L'L)
  bool legacy = true;  // not VEX or EVEX
  bool evex = false;
  bool r = false, x = false, b = false;  // register extensions (REX, VEX, EVEX)
};

class Cursor {
 public:
  explicit Cursor(const uint8_t* p) : start_(p), p_(p) {}
  uint8_t next() { return *p_++; }
  uint8_t peek() const { return *p_; }
  int32_t take(int bytes) {  // little-endian, sign-extended
    uint32_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint32_t(next()) << (8 * i);
    if (bytes == 1) return int8_t(v);
    if (bytes == 2) return int16_t(v);
    return int32_t(v);
  }
  uint8_t length() const { return uint8_t(p_ - start_); }

 private:
  const uint8_t* start_;
  const uint8_t* p_;
};

Prefixes read_prefixes(Cursor& c) {
  Prefixes px;
  for (int i = 0; i < 14; ++i) {
    switch (c.peek()) {
      case 0x66:
        px.op16 = true;
        break;
      case 0xf3:
        px.rep = true;
        break;
      case 0xf2:
        px.repne = true;
        break;
      case 0xf0:
      case 0x2e:
      case 0x36:
      case 0x3e:
      case 0x26:
        break;  // lock, ignored segments
      case 0x64:
      case 0x65:
      case 0x67:
        px.unsupported = true;
        break;  // FS/GS, 32-bit address
      default:
        goto done;
    }
    c.next();
  }
done:
  if ((c.peek() & 0xf0) == 0x40) px.rex = c.next();
  return px;
}

// The opcode, through the escape bytes or a VEX/EVEX prefix.
Opcode read_opcode(Cursor& c, const Prefixes& px) {
  Opcode o;
  uint8_t b0 = c.next();
  if (b0 == 0xc5) {  // two-byte VEX: map 0F
    uint8_t b1 = c.next();
    o.legacy = false;
    o.map = 1;
    o.r = !(b1 & 0x80);
    o.vl = (b1 & 0x04) ? 32 : 16;
    o.pp = b1 & 3;
  } else if (b0 == 0xc4 || b0 == 0x62) {  // three-byte VEX, or EVEX
    uint8_t b1 = c.next(), b2 = c.next();
    o.legacy = false;
    o.r = !(b1 & 0x80);
    o.x = !(b1 & 0x40);
    o.b = !(b1 & 0x20);
    o.w = b2 & 0x80;
    o.pp = b2 & 3;
    if (b0 == 0xc4) {
      o.map = b1 & 0x1f;
      o.vl = (b2 & 0x04) ? 32 : 16;
    } else {
      uint8_t b3 = c.next();
      o.evex = true;
      o.map = b1 & 0x07;
      int ll = (b3 >> 5) & 3;
      o.vl = ll == 3 ? 0 : 16 << ll;
      if (b3 & 0x10) o.vl = 0;  // embedded broadcast: not a plain store
    }
  } else {
    o.r = px.rex & 4;
    o.x = px.rex & 2;
    o.b = px.rex & 1;
    o.w = px.rex & 8;
    o.pp = px.op16 ? 1 : px.rep ? 2 : px.repne ? 3 : 0;
    if (b0 != 0x0f) {
      o.op = b0;
      return o;
    }
    uint8_t b1 = c.next();
    o.map = b1 == 0x38 ? 2 : b1 == 0x3a ? 3 : 1;
    if (o.map == 1) {
      o.op = b1;
      return o;
    }
  }
  o.op = c.next();
  return o;
}

// Bytes stored by a vector store of this opcode, 0 if it is not one.
int vector_width(const Opcode& o) {
  const int vl = o.vl;
  if (o.map == 1) {
    switch (o.op) {
      case 0x11:
        return o.pp == 2 ? 4 : o.pp == 3 ? 8 : vl;  // MOVUPS/UPD, MOVSS, MOVSD
      case 0x13:
      case 0x17:
        return o.pp <= 1 ? 8 : 0;  // MOVLPS/PD, MOVHPS/PD
      case 0x29:
      case 0x2b:
        return o.pp <= 1 ? vl : 0;  // MOVAPS/PD, MOVNTPS/PD
      case 0x7e:                    // MOVD/MOVQ r/m, xmm (66); the MMX form without it
        return (o.pp == 1 || (o.pp == 0 && o.legacy)) ? (o.w ? 8 : 4) : 0;
      case 0x7f:  // MOVDQA (66), MOVDQU (F3), EVEX's VMOVDQU8/16 (F2); MMX MOVQ without a prefix
        if (o.pp == 0) return o.legacy ? 8 : 0;
        return (o.pp == 3 && !o.evex) ? 0 : vl;
      case 0xd6:
        return o.pp == 1 ? 8 : 0;  // MOVQ xmm/m64
      case 0xe7:
        return o.pp == 1 ? vl : (o.pp == 0 && o.legacy) ? 8 : 0;  // MOVNTDQ, MOVNTQ
      default:
        return 0;
    }
  }
  if (o.map == 2) {  // VEX only: VPMASKMOVD/Q and VMASKMOVPS/PD, the store forms
    if (o.legacy || o.evex || o.pp != 1) return 0;
    return (o.op == 0x8e || o.op == 0x2e || o.op == 0x2f) ? vl : 0;
  }
  if (o.map == 3 && o.pp == 1) {
    switch (o.op) {
      case 0x14:
        return 1;  // PEXTRB
      case 0x15:
        return 2;  // PEXTRW
      case 0x16:
        return o.w ? 8 : 4;  // PEXTRD/Q
      case 0x17:
        return 4;  // EXTRACTPS
      case 0x19:
      case 0x39:
        return o.legacy ? 0 : 16;  // VEXTRACTF/I128, ...32x4/64x2
      case 0x1b:
      case 0x3b:
        return o.evex ? 32 : 0;  // VEXTRACTF/I32x8, ...64x4
      default:
        return 0;
    }
  }
  return 0;
}

// ModRM, SIB and displacement of a memory operand; false for a register operand. disp8_scale is
// EVEX's compressed displacement factor (N; 1 elsewhere).
bool read_memory_operand(Cursor& c, const Opcode& o, int disp8_scale, StoreInsn& s, int* reg) {
  uint8_t modrm = c.next();
  int mod = modrm >> 6, rm = modrm & 7;
  *reg = ((modrm >> 3) & 7) | (o.r ? 8 : 0);
  if (mod == 3) return false;
  int disp_bytes = mod == 1 ? 1 : mod == 2 ? 4 : 0;
  if (rm == 4) {
    uint8_t sib = c.next();
    s.scale = uint8_t(1 << (sib >> 6));
    int index = ((sib >> 3) & 7) | (o.x ? 8 : 0);
    s.index = index == 4 ? kNoReg : int8_t(index);
    if ((sib & 7) == 5 && mod == 0) {
      s.base = kNoReg;
      disp_bytes = 4;
    } else {
      s.base = int8_t((sib & 7) | (o.b ? 8 : 0));
    }
  } else if (rm == 5 && mod == 0) {
    s.base = kRegRip;
    disp_bytes = 4;
  } else {
    s.base = int8_t(rm | (o.b ? 8 : 0));
  }
  if (disp_bytes) s.disp = c.take(disp_bytes) * (disp_bytes == 1 ? disp8_scale : 1);
  return true;
}

// MOV, MOVNTI, MOVBE from a general register, MOV from an immediate, and the string stores.
StoreInsn decode_general(Cursor& c, const Prefixes& px, const Opcode& o) {
  StoreInsn s;
  const uint8_t full = o.w ? 8 : px.op16 ? 2 : 4;
  const bool byte_op = o.map == 0 && (o.op == 0x88 || o.op == 0xc6 || o.op == 0xa4 || o.op == 0xaa);
  if (o.map == 0 && (o.op == 0xa4 || o.op == 0xa5 || o.op == 0xaa || o.op == 0xab)) {
    s.kind = StoreInsn::kString;
    s.width = byte_op ? 1 : full;
    s.base = 7;  // [RDI]
    s.from_memory = o.op == 0xa4 || o.op == 0xa5;
    s.rep = px.rep || px.repne;
    s.length = c.length();
    return s;
  }
  bool gpr = (o.map == 0 && (o.op == 0x88 || o.op == 0x89)) || (o.map == 1 && o.op == 0xc3) ||
             (o.map == 2 && o.op == 0xf1 && !px.rep && !px.repne);
  bool imm = o.map == 0 && (o.op == 0xc6 || o.op == 0xc7);
  if (!gpr && !imm) return s;
  int reg = 0;
  if (!read_memory_operand(c, o, 1, s, &reg)) return StoreInsn{};
  s.width = byte_op ? 1 : full;
  if (imm) {
    if ((reg & 7) != 0) return StoreInsn{};  // C6/C7 with another /digit is not a MOV
    int bytes = s.width == 8 ? 4 : s.width;
    s.imm = uint64_t(int64_t(c.take(bytes)));
    s.kind = StoreInsn::kImm;
  } else {
    s.kind = StoreInsn::kGpr;
    s.src = int8_t(reg);
    s.src_high8 = s.width == 1 && !px.rex && reg >= 4 && reg <= 7;
    if (s.src_high8) s.src = int8_t(reg - 4);
    s.byte_swap = o.map == 2;
  }
  s.length = c.length();
  return s;
}

}  // namespace

StoreInsn decode_store(const uint8_t* code) {
  Cursor c(code);
  Prefixes px = read_prefixes(c);
  if (px.unsupported) return {};
  Opcode o = read_opcode(c, px);
  if (o.legacy && (o.map == 0 || (o.map == 1 && o.op == 0xc3) || (o.map == 2 && o.op == 0xf1)))
    return decode_general(c, px, o);
  int width = o.vl ? vector_width(o) : 0;
  if (!width) return {};
  StoreInsn s;
  int reg = 0;
  if (!read_memory_operand(c, o, o.evex ? width : 1, s, &reg)) return {};
  s.kind = StoreInsn::kVector;
  s.width = uint8_t(width);
  return s;
}

}  // namespace emu::mmio
