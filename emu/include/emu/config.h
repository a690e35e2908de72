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
uint32_t xrc_policy_now();
bool xrc_tgt_dies_with_xrcd_now();

struct KnobDoc {
  const char* name;
  const char* default_value;
  const char* doc;
};

const Config& config();    // read once from the environment
Config config_from_env();  // fresh read (tests)
const KnobDoc* knob_docs(int* count);

void log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace emu
