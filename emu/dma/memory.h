// SPDX-License-Identifier: BSD-2-Clause
// The device's DMA: moving bytes between registered memory of any two attached processes.
// A process's own memory is copied directly; another's through process_vm_readv/writev, which is
// what lets one-sided operations complete without the target process running.
#pragma once
#include <cstdint>

namespace emu {

struct MemSpan {
  uint64_t addr;
  uint64_t len;
};

enum class CopyResult { ok, src_fault, dst_fault, src_gone, dst_gone };

// Copies the gather list src (in process src_pid) to the scatter list dst (in dst_pid), in order.
// A pid equal to the caller's own (or 0) means "this address space". Total lengths must match.
CopyResult dma_copy(int src_pid, const MemSpan* src, int nsrc, int dst_pid, const MemSpan* dst,
                    int ndst);

// 8-byte read and write in another process (atomics, under the device's atomic lock).
CopyResult dma_read64(int pid, uint64_t addr, uint64_t* out);
CopyResult dma_write64(int pid, uint64_t addr, uint64_t value);

}  // namespace emu
