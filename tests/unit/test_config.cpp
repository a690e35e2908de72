#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "emu/config.h"

using namespace emu;

TEST(Config, DefaultsWhenUnset) {
  unsetenv("EMU_DEVICES");
  unsetenv("EMU_UARS");
  unsetenv("EMU_ENGINE");
  Config c = config_from_env();
  EXPECT_EQ(c.num_devices, 1u);
  EXPECT_EQ(c.uar_regs, 16u);
  EXPECT_EQ(c.engine, EngineMode::inline_on_doorbell);
}

TEST(Config, ParsesAndClamps) {
  setenv("EMU_DEVICES", "3", 1);
  setenv("EMU_PORTS", "9", 1);  // above the maximum of 4
  setenv("EMU_SHM_SIZE", "64M", 1);
  setenv("EMU_ENGINE", "thread", 1);
  Config c = config_from_env();
  EXPECT_EQ(c.num_devices, 3u);
  EXPECT_EQ(c.ports_per_dev, 4u);
  EXPECT_EQ(c.shm_size, 64ull << 20);
  EXPECT_EQ(c.engine, EngineMode::progress_thread);
  unsetenv("EMU_DEVICES");
  unsetenv("EMU_PORTS");
  unsetenv("EMU_SHM_SIZE");
  unsetenv("EMU_ENGINE");
}

TEST(Config, SegmentNameIsPerUserAndFabric) {
  std::string saved = std::getenv("EMU_FABRIC");
  setenv("EMU_FABRIC", "abc", 1);
  Config c = config_from_env();
  EXPECT_EQ(c.segment_name(), "rdmaemu-" + std::to_string(getuid()) + "-abc");
  setenv("EMU_FABRIC", saved.c_str(), 1);
}

TEST(Config, EveryKnobIsDocumented) {
  int n = 0;
  const KnobDoc* d = knob_docs(&n);
  ASSERT_GE(n, 7);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(std::string(d[i].name).rfind("EMU_", 0), 0u) << d[i].name;
    EXPECT_NE(std::string(d[i].doc), "");
  }
}

TEST(Config, DocsListEveryKnobWithItsDefault) {
  std::ifstream f(EMU_SOURCE_DIR "/docs/knobs.md");
  ASSERT_TRUE(f) << "docs/knobs.md";
  std::stringstream ss;
  ss << f.rdbuf();
  std::string doc = ss.str();
  int n = 0;
  const KnobDoc* d = knob_docs(&n);
  for (int i = 0; i < n; ++i) {
    std::string row = std::string("| ") + d[i].name + " | " + d[i].default_value + " |";
    EXPECT_NE(doc.find(row), std::string::npos) << "docs/knobs.md lacks the row " << row;
  }
}
