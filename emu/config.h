// Runtime knobs. Every one is an EMU_* environment variable; the table in config.cpp is the single
// place that names them, with their defaults and documentation (a unit test checks that
// docs/knobs.md lists each with the same default).
#pragma once
#include <cstdint>
#include <string>

namespace emu {

enum class EngineMode { inline_on_doorbell, progress_thread };

struct Config {
  std::string fabric;       // EMU_FABRIC
  std::string shm_dir;      // EMU_SHM_DIR
  uint64_t shm_size;        // EMU_SHM_SIZE
  uint32_t num_devices;     // EMU_DEVICES
  uint32_t ports_per_dev;   // EMU_PORTS
  uint32_t uar_regs;        // EMU_UARS
  EngineMode engine;        // EMU_ENGINE
  bool log;                 // EMU_LOG
  uint32_t vendor_part_id;  // EMU_VENDOR_PART_ID

  // The segment's file name: one per user and fabric.
  std::string segment_name() const;
  std::string segment_path() const;
};

struct KnobDoc {
  const char* name;
  const char* default_value;
  const char* doc;
};

const Config& config();              // read once from the environment
Config config_from_env();            // fresh read (tests)
const KnobDoc* knob_docs(int* count);

void log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace emu
