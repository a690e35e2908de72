// SPDX-License-Identifier: BSD-2-Clause
// Runtime knobs. Every one is an EMU_* environment variable; the table in emu/control/config.cpp
// is the single place that names them, with their defaults and documentation (docs/knobs.md's
// table is its output, `emu-ctl knobs --markdown`, and the test docs.knobs_table compares them).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace emu {

enum class EngineMode { inline_on_doorbell, progress_thread };
// When the provider's own posts go through BlueFlame (EMU_BLUEFLAME).
enum class BlueFlameUse { unlocked_registers, always, never };
// Numbered as IBV_LINK_LAYER_* (and LinkLayer in layout.h).
enum class PortLinkLayer : uint8_t { infiniband = 1, ethernet = 2 };

struct Config {
  std::string fabric;       // EMU_FABRIC
  std::string shm_dir;      // EMU_SHM_DIR
  uint64_t shm_size;        // EMU_SHM_SIZE
  uint64_t shm_limit;       // EMU_SHM_LIMIT (0: none)
  bool persist;             // EMU_FABRIC_PERSIST
  uint32_t num_devices;     // EMU_DEVICES
  uint32_t ports_per_dev;   // EMU_PORTS
  uint32_t uar_regs;        // EMU_UARS
  uint32_t td_uar_regs;     // EMU_TD_UARS
  bool single_threaded;     // EMU_SINGLE_THREADED
  BlueFlameUse blueflame;   // EMU_BLUEFLAME
  bool mmio_trap;           // EMU_MMIO: trap (plain stores to registers reach the device) or call
  bool personality_mlx5;    // EMU_PERSONALITY: mlx5 (a ConnectX part to mlx5dv) or emu
  EngineMode engine;        // EMU_ENGINE
  bool log;                 // EMU_LOG
  uint32_t vendor_part_id;  // EMU_VENDOR_PART_ID
  uint64_t staging;         // EMU_STAGING: a receive CQ's staging area, bytes (0: none)
  // Per port, from port 1; the last entry stands for every later port.
  std::vector<PortLinkLayer> link_layers;  // EMU_LINK_LAYER (never empty)
  std::vector<std::string> roce_netdevs;   // EMU_ROCE_NETDEV (entries may be "auto" or "")

  // Port p's (1-based) link layer and RoCE interface ("" = choose the default).
  PortLinkLayer link_layer(uint32_t port) const;
  std::string roce_netdev(uint32_t port) const;

  // The segment's file name: one per user and fabric.
  std::string segment_name() const;
  std::string segment_path() const;
};

// XRC knobs are read when they are used (a domain's or TGT QP's creation), not cached: the values
// are XrcPolicy (layout.h) and whether a TGT QP created now outlives its last handle's process.
// false: the value is malformed (reported on stderr); the verb fails with EINVAL.
bool xrc_policy_now(uint32_t* policy);
bool xrc_tgt_dies_with_xrcd_now(bool* dies_with_xrcd);

// What a knob's value may be. Every knob is parsed by one strict parser of its kind: a value that
// is not wholly of its kind, or lies outside its bounds, is an error naming the knob and what it
// allows (knob_error), never a fallback. Unset and empty are the same: the default.
enum class KnobKind : uint8_t {
  name,     // 1 to 128 of A-Z a-z 0-9 . _ - (it becomes part of a file name)
  dir,      // an absolute path
  file,     // a path that does not end in '/'
  flag,     // 0 or 1
  integer,  // decimal digits (or 0x and hex digits), in [lo, hi]
  size,     // an integer with an optional K, M, G or T suffix, in [lo, hi]; or 0 with zero_ok
  number,   // a decimal number, more than 0 and finite
  word,     // one of `words` (separated by '|')
  words,    // a comma-separated list, each entry one of `words`
  ifnames,  // a comma-separated list of interface names (as the kernel allows them), or auto
  grammar,  // `check`'s own grammar; `words` says it in a line
};

struct KnobDoc {
  const char* name;
  const char* default_value;
  const char* doc;
  KnobKind kind;
  uint64_t lo, hi;                                     // integer and size
  const char* words;                                   // word, words; grammar: its summary
  bool (*check)(const char* value, std::string* why);  // grammar
  bool zero_ok;                                        // size: 0 is allowed below lo
};

const Config& config();    // read once from the environment
Config config_from_env();  // fresh read (tests); a malformed knob is taken at its default
const KnobDoc* knob_docs(int* count);
// What the knob allows, in words (its error message's, and docs/knobs.md's values column).
std::string knob_allowed(const KnobDoc& k);

// The message for `value` of knob `name` ("" if the value is well formed): it names the knob, the
// value and what the knob allows.
std::string knob_error(const char* name, const char* value);
// Every knob of the table as the environment has it now: the messages of the malformed ones, one
// a line ("" if none). Tests; a program asks knobs_refused().
std::string knob_errors_in_env();
// Whether the process's knobs are refused: read once, and the first caller prints the messages to
// stderr. The entry verbs (ibv_get_device_list, ibv_open_device, a segment attach) then fail with
// EINVAL, so that a mistyped knob stops the program at its first verb instead of running it on a
// default it did not ask for.
bool knobs_refused();

// A knob's value by its kind (the default when unset, empty or malformed: a malformed one has been
// refused at the first verb). For modules that read their knob where they use it.
bool knob_flag(const char* name);
uint64_t knob_uint(const char* name);  // integer and size
double knob_number(const char* name);

void log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace emu
