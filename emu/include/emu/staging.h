// SPDX-License-Identifier: BSD-2-Clause
// The receive staging area of a CQ (docs/design/registered-memory.md, "Staging of two-sided
// payloads"): a heap block of the segment where a sender's engine leaves a SEND's payload for the
// receiver's poll to copy into the buffers of the receive WQE it consumed. It is made of 1 KiB
// slots; a payload takes a run of slots inside one 64-bit word of the free map, claimed with a
// compare-and-swap by any engine of any process, and the poller releases it with one fetch-and,
// in whatever order CQEs are polled. Slot 0 holds the map itself. No room: the engine places the
// payload directly, as without an area; nothing ever waits for the poller.
#pragma once
#include <atomic>
#include <cstdint>

namespace emu {

constexpr uint32_t kStagingSlotShift = 10;  // 1 KiB slots
constexpr uint32_t kStagingSlotBytes = 1u << kStagingSlotShift;
constexpr uint64_t kStagingMinBytes = 64u << 10;
// The map in slot 0 after its 64-byte header: 64 words of 64 KiB each, 4 MiB at most.
constexpr uint64_t kStagingMaxBytes = 4u << 20;
// The largest payload the engine stages (a run may span a whole map word, 64 KiB). Above it the
// second copy costs more than the system call it saves: the receiver's core then pulls every line
// from the sender's cache (ib_send_lat, A/B: 8 KiB 0.80x, 16 KiB 1.14x, 32 KiB 1.49x, 64 KiB 1.8x
// of direct placement), so larger payloads are placed directly.
constexpr uint64_t kStagingMaxPayload = 8 * kStagingSlotBytes;

struct StagingArea {
  uint32_t magic;  // kStagingMagic once laid out
  uint32_t words;  // map words (bytes / 64 KiB)
  uint64_t bytes;  // the heap block's size
  uint64_t rsvd[6];
  // The map follows: `words` words; bit i of word w set: slot 64 w + i taken.
  std::atomic<uint64_t>* map() { return reinterpret_cast<std::atomic<uint64_t>*>(this + 1); }
  const std::atomic<uint64_t>* map() const {
    return reinterpret_cast<const std::atomic<uint64_t>*>(this + 1);
  }
};
static_assert(sizeof(StagingArea) == 64);
constexpr uint32_t kStagingMagic = 0x53544731;  // "STG1"

// What a staged receive CQE carries in its bytes 0..15 (free in a receive CQE whose payload is not
// inline): the word of the map and the run of slots in it.
struct StagedRef {
  uint64_t mask;
  uint32_t word;
  uint32_t rsvd;
};

// The area's size for a request of `bytes` (EMU_STAGING): a power of two within
// [kStagingMinBytes, kStagingMaxBytes], 0 for 0.
uint64_t staging_area_bytes(uint64_t bytes);
// Lays a zeroed block out as an area (slot 0 taken by the map).
void staging_init(StagingArea* a, uint64_t bytes);
// Claims slots for `len` bytes (1..kStagingMaxPayload): false if no run is free.
bool staging_take(StagingArea* a, uint64_t len, StagedRef* ref);
void staging_release(StagingArea* a, const StagedRef& ref);
inline uint8_t* staging_data(StagingArea* a, const StagedRef& ref) {
  uint32_t slot = ref.word * 64 + static_cast<uint32_t>(__builtin_ctzll(ref.mask));
  return reinterpret_cast<uint8_t*>(a) + (uint64_t{slot} << kStagingSlotShift);
}
// Slots taken, over all words (tests, the checker: slot 0 excluded).
uint64_t staging_taken(const StagingArea* a);

}  // namespace emu
