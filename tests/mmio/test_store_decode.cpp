// SPDX-License-Identifier: BSD-2-Clause
// The store decoder on encodings written out by hand (Intel SDM): what it must take, and loads,
// register-to-register moves and segment-relative stores it must leave alone.
#include <gtest/gtest.h>

#include <vector>

#include "store_decode.h"

using emu::mmio::decode_store;
using emu::mmio::kNoReg;
using emu::mmio::kRegRip;
using emu::mmio::StoreInsn;

namespace {

StoreInsn decode(std::vector<uint8_t> bytes) {
  bytes.resize(16, 0x90);
  return decode_store(bytes.data());
}

TEST(StoreDecode, GeneralRegisterMoves) {
  StoreInsn s = decode({0x48, 0x89, 0x02});  // mov %rax,(%rdx)
  EXPECT_EQ(StoreInsn::kGpr, s.kind);
  EXPECT_EQ(8, s.width);
  EXPECT_EQ(3, s.length);
  EXPECT_EQ(2, s.base);
  EXPECT_EQ(0, s.src);
  s = decode({0x45, 0x89, 0x4c, 0x93, 0x10});  // mov %r9d,0x10(%r11,%rdx,4)
  EXPECT_EQ(StoreInsn::kGpr, s.kind);
  EXPECT_EQ(4, s.width);
  EXPECT_EQ(5, s.length);
  EXPECT_EQ(11, s.base);
  EXPECT_EQ(2, s.index);
  EXPECT_EQ(4, s.scale);
  EXPECT_EQ(0x10, s.disp);
  EXPECT_EQ(9, s.src);
  s = decode({0x66, 0x89, 0x87, 0x00, 0x01, 0x00, 0x00});  // mov %ax,0x100(%rdi)
  EXPECT_EQ(2, s.width);
  EXPECT_EQ(7, s.length);
  EXPECT_EQ(0x100, s.disp);
  s = decode({0x88, 0x26});  // mov %ah,(%rsi)
  EXPECT_EQ(1, s.width);
  EXPECT_TRUE(s.src_high8);
  EXPECT_EQ(0, s.src);
  s = decode({0x40, 0x88, 0x26});  // mov %spl,(%rsi): with REX, reg 4 is SPL
  EXPECT_FALSE(s.src_high8);
  EXPECT_EQ(4, s.src);
  s = decode({0x48, 0x0f, 0xc3, 0x07});  // movnti %rax,(%rdi)
  EXPECT_EQ(StoreInsn::kGpr, s.kind);
  EXPECT_EQ(8, s.width);
  s = decode({0x48, 0x0f, 0x38, 0xf1, 0x07});  // movbe %rax,(%rdi)
  EXPECT_TRUE(s.byte_swap);
  EXPECT_EQ(5, s.length);
  s = decode({0x48, 0x89, 0x05, 0x10, 0x00, 0x00, 0x00});  // mov %rax,0x10(%rip)
  EXPECT_EQ(kRegRip, s.base);
  EXPECT_EQ(7, s.length);
}

TEST(StoreDecode, Immediates) {
  StoreInsn s = decode({0x48, 0xc7, 0x07, 0xfe, 0xff, 0xff, 0xff});  // movq $-2,(%rdi)
  EXPECT_EQ(StoreInsn::kImm, s.kind);
  EXPECT_EQ(8, s.width);
  EXPECT_EQ(uint64_t(-2), s.imm);
  EXPECT_EQ(7, s.length);
  s = decode({0x66, 0xc7, 0x47, 0x08, 0x34, 0x12});  // movw $0x1234,0x8(%rdi)
  EXPECT_EQ(2, s.width);
  EXPECT_EQ(0x1234u, s.imm);
  EXPECT_EQ(6, s.length);
  s = decode({0xc6, 0x04, 0x24, 0x5a});  // movb $0x5a,(%rsp)
  EXPECT_EQ(1, s.width);
  EXPECT_EQ(4, s.base);
  EXPECT_EQ(kNoReg, s.index);
  EXPECT_EQ(4, s.length);
  EXPECT_EQ(StoreInsn::kNone, decode({0xc7, 0x4f, 0x08, 0, 0, 0, 0}).kind);  // C7 /1 is no MOV
}

TEST(StoreDecode, Strings) {
  StoreInsn s = decode({0xf3, 0xa4});  // rep movsb
  EXPECT_EQ(StoreInsn::kString, s.kind);
  EXPECT_TRUE(s.rep);
  EXPECT_TRUE(s.from_memory);
  EXPECT_EQ(1, s.width);
  EXPECT_EQ(2, s.length);
  s = decode({0xf3, 0x48, 0xab});  // rep stosq
  EXPECT_FALSE(s.from_memory);
  EXPECT_EQ(8, s.width);
  EXPECT_EQ(3, s.length);
  s = decode({0xa5});  // movsl
  EXPECT_FALSE(s.rep);
  EXPECT_EQ(4, s.width);
}

TEST(StoreDecode, VectorStoresOfEveryEncoding) {
  StoreInsn s = decode({0x0f, 0x11, 0x07});  // movups %xmm0,(%rdi)
  EXPECT_EQ(StoreInsn::kVector, s.kind);
  EXPECT_EQ(16, s.width);
  EXPECT_EQ(8, decode({0xf2, 0x0f, 0x11, 0x07}).width);           // movsd
  EXPECT_EQ(4, decode({0xf3, 0x0f, 0x11, 0x07}).width);           // movss
  EXPECT_EQ(16, decode({0x66, 0x0f, 0x7f, 0x07}).width);          // movdqa
  EXPECT_EQ(16, decode({0xf3, 0x0f, 0x7f, 0x07}).width);          // movdqu
  EXPECT_EQ(8, decode({0x66, 0x0f, 0xd6, 0x07}).width);           // movq %xmm0,(%rdi)
  EXPECT_EQ(8, decode({0x66, 0x48, 0x0f, 0x7e, 0x07}).width);     // movq %xmm0,(%rdi) (7E form)
  EXPECT_EQ(4, decode({0x66, 0x0f, 0x7e, 0x07}).width);           // movd
  EXPECT_EQ(2, decode({0x66, 0x0f, 0x3a, 0x15, 0x07, 3}).width);  // pextrw
  EXPECT_EQ(32, decode({0xc5, 0xfe, 0x7f, 0x07}).width);          // vmovdqu %ymm0,(%rdi)
  EXPECT_EQ(16, decode({0xc5, 0xfa, 0x7f, 0x07}).width);          // vmovdqu %xmm0,(%rdi)
  s = decode({0xc4, 0xc1, 0x7c, 0x11, 0x03});                     // vmovups %ymm0,(%r11)
  EXPECT_EQ(32, s.width);
  EXPECT_EQ(11, s.base);
  s = decode({0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x47, 0x01});  // vmovdqu64 %zmm0,0x40(%rdi)
  EXPECT_EQ(StoreInsn::kVector, s.kind);
  EXPECT_EQ(64, s.width);
  EXPECT_EQ(7, s.base);
  EXPECT_EQ(64, s.disp);                             // disp8 1, compressed by the operand size
  s = decode({0x62, 0xe1, 0x7f, 0x29, 0x7f, 0x0f});  // vmovdqu8 %ymm17,(%rdi){%k1}
  EXPECT_EQ(StoreInsn::kVector, s.kind);
  EXPECT_EQ(32, s.width);
}

TEST(StoreDecode, WhatIsNotAStoreItKnows) {
  EXPECT_EQ(StoreInsn::kNone, decode({0x48, 0x8b, 0x02}).kind);              // load
  EXPECT_EQ(StoreInsn::kNone, decode({0x48, 0x89, 0xc2}).kind);              // register move
  EXPECT_EQ(StoreInsn::kNone, decode({0x64, 0x48, 0x89, 0x02}).kind);        // %fs:
  EXPECT_EQ(StoreInsn::kNone, decode({0x0f, 0x10, 0x07}).kind);              // movups load
  EXPECT_EQ(StoreInsn::kNone, decode({0xf3, 0x0f, 0x7e, 0x07}).kind);        // movq load
  EXPECT_EQ(StoreInsn::kNone, decode({0xf0, 0x48, 0x0f, 0xc1, 0x02}).kind);  // lock xadd
  EXPECT_EQ(StoreInsn::kNone, decode({0xc5, 0xfe, 0x6f, 0x07}).kind);        // vmovdqu load
}

}  // namespace
