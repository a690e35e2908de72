// SPDX-License-Identifier: BSD-2-Clause
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

TEST(Config, ParsesAndRefusesWhatIsOutOfBounds) {
  setenv("EMU_DEVICES", "3", 1);
  setenv("EMU_PORTS", "9", 1);  // above the maximum of 4: refused, not clamped
  setenv("EMU_SHM_SIZE", "64M", 1);
  setenv("EMU_ENGINE", "thread", 1);
  Config c = config_from_env();
  EXPECT_EQ(c.num_devices, 3u);
  EXPECT_EQ(c.ports_per_dev, 1u) << "a refused value is not used (the first verb fails)";
  EXPECT_EQ(c.shm_size, 64ull << 20);
  EXPECT_EQ(c.engine, EngineMode::progress_thread);
  EXPECT_EQ(knob_errors_in_env(),
            "rdmaemu: EMU_PORTS=9: expected an integer from 1 to 4 (decimal, or 0x and hex "
            "digits)\n");
  unsetenv("EMU_DEVICES");
  unsetenv("EMU_PORTS");
  unsetenv("EMU_SHM_SIZE");
  unsetenv("EMU_ENGINE");
}

// Each kind's parser, at its edges: what it takes and what it refuses (knob_error is "" for a
// well-formed value, else the message naming the knob, the value and what the knob allows).
TEST(Config, EachKindTakesItsValuesAndRefusesTheRest) {
  struct Case {
    const char* knob;
    const char* value;
    bool ok;
  };
  const Case cases[] = {
      {"EMU_UARS", "1", true},
      {"EMU_UARS", "64", true},
      {"EMU_UARS", "0x10", true},
      {"EMU_UARS", "0", false},
      {"EMU_UARS", "65", false},
      {"EMU_UARS", "abc", false},
      {"EMU_UARS", "16 ", false},
      {"EMU_UARS", " 16", false},
      {"EMU_UARS", "+16", false},
      {"EMU_UARS", "16abc", false},
      {"EMU_UARS", "0x", false},
      {"EMU_UARS", "99999999999999999999999", false},
      {"EMU_SHM_SIZE", "8M", true},
      {"EMU_SHM_SIZE", "4g", true},
      {"EMU_SHM_SIZE", "1T", true},
      {"EMU_SHM_SIZE", "8388608", true},
      {"EMU_SHM_SIZE", "8388607", false},
      {"EMU_SHM_SIZE", "1025G", false},
      {"EMU_SHM_SIZE", "zz", false},
      {"EMU_SHM_SIZE", "4GB", false},
      {"EMU_SHM_SIZE", "G", false},
      {"EMU_SHM_SIZE", "17179869184G", false},
      {"EMU_STAGING", "0", true},
      {"EMU_STAGING", "64K", true},
      {"EMU_STAGING", "4M", true},
      {"EMU_STAGING", "100K", true},
      {"EMU_STAGING", "63K", false},
      {"EMU_STAGING", "5M", false},
      {"EMU_SHM_LIMIT", "0", true},
      {"EMU_SHM_LIMIT", "256K", true},
      {"EMU_LOG", "0", true},
      {"EMU_LOG", "1", true},
      {"EMU_LOG", "2", false},
      {"EMU_LOG", "true", false},
      {"EMU_LOG", "01", false},
      {"EMU_ENGINE", "inline", true},
      {"EMU_ENGINE", "thread", true},
      {"EMU_ENGINE", "bogus", false},
      {"EMU_ENGINE", "threads", false},
      {"EMU_BLUEFLAME", "never", true},
      {"EMU_BLUEFLAME", "1", false},
      {"EMU_LINK_LAYER", "ib,eth,eth", true},
      {"EMU_LINK_LAYER", "ib,", false},
      {"EMU_LINK_LAYER", "eth,roce", false},
      {"EMU_ROCE_NETDEV", "auto,lo", true},
      {"EMU_ROCE_NETDEV", "eth0,", true},
      {"EMU_ROCE_NETDEV", "a/b", false},
      {"EMU_ROCE_NETDEV", "sixteen-chars-xx", false},
      {"EMU_ACK_TIMEOUT_SCALE", "0.01", true},
      {"EMU_ACK_TIMEOUT_SCALE", "0", false},
      {"EMU_ACK_TIMEOUT_SCALE", "inf", false},
      {"EMU_ACK_TIMEOUT_SCALE", "1x", false},
      {"EMU_FABRIC", "san-verbs_1.2", true},
      {"EMU_FABRIC", "a/b", false},
      {"EMU_SHM_DIR", "/dev/shm", true},
      {"EMU_SHM_DIR", "shm", false},
      {"EMU_PCAP", "/tmp/x.pcapng", true},
      {"EMU_PCAP", "/tmp/", false},
      {"EMU_VENDOR_PART_ID", "0x101b", true},
      {"EMU_VENDOR_PART_ID", "0x100000000", false},
      {"EMU_CM_IB_ADDRS", "emu0:1=10.0.0.1,emu1:2=10.0.0.2", true},
      {"EMU_CM_IB_ADDRS", "emu0:1=10.0.0.1,", false},
      {"EMU_CM_IB_ADDRS", "emu0:1=10.0.0", false},
      {"EMU_KILL_AT", "doorbell:3", true},
      {"EMU_KILL_AT", "doorbell:0", false},
      {"EMU_FAULTS", "seed=1;drop:p=0.1", true},
      {"EMU_FAULTS", "seed=1;explode", false},
      {"EMU_INJECT", "wc:status=IBV_WC_REM_ACCESS_ERR,nth=2", true},
      {"EMU_INJECT", "wc:status=bogus", false},
      {"EMU_SCHEDULE", "pct:seed=7", true},
      {"EMU_SCHEDULE", "pct:seed=x", false},
      {"EMU_XRC_POLICY", "creator", true},
      {"EMU_XRC_POLICY", "Kernel", false},
      {"EMU_XRC_TGT_LIFETIME", "xrcd", true},
      {"EMU_XRC_TGT_LIFETIME", "1", false},
  };
  for (const Case& c : cases) {
    std::string e = knob_error(c.knob, c.value);
    if (c.ok) {
      EXPECT_EQ(e, "") << c.knob << "=" << c.value;
    } else {
      std::string head = std::string("rdmaemu: ") + c.knob + "=" + c.value + ": ";
      EXPECT_EQ(e.rfind(head, 0), 0u) << c.knob << "=" << c.value << ": " << e;
      EXPECT_NE(e.find("expected "), std::string::npos) << e;
    }
  }
}

// Every default of the table is a value its own knob takes, and unset or empty is the default.
TEST(Config, EveryDefaultIsWellFormed) {
  int n = 0;
  const KnobDoc* d = knob_docs(&n);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(knob_error(d[i].name, d[i].default_value), "") << d[i].name;
    EXPECT_EQ(knob_error(d[i].name, ""), "") << d[i].name;
    EXPECT_NE(knob_allowed(d[i]), "") << d[i].name;
  }
}

// A knob read at each use (the XRC ones) is checked there too: a bad value set after the first
// verb fails the verb that reads it (ibv_open_xrcd with EINVAL), it does not fall back.
TEST(Config, XrcKnobsAreCheckedWhereTheyAreRead) {
  uint32_t policy = 99;
  setenv("EMU_XRC_POLICY", "creator", 1);
  ASSERT_TRUE(xrc_policy_now(&policy));
  EXPECT_EQ(policy, 2u);
  setenv("EMU_XRC_POLICY", "sometimes", 1);
  EXPECT_FALSE(xrc_policy_now(&policy));
  unsetenv("EMU_XRC_POLICY");
  ASSERT_TRUE(xrc_policy_now(&policy));
  EXPECT_EQ(policy, 0u);
  bool dies = true;
  setenv("EMU_XRC_TGT_LIFETIME", "forever", 1);
  EXPECT_FALSE(xrc_tgt_dies_with_xrcd_now(&dies));
  unsetenv("EMU_XRC_TGT_LIFETIME");
  ASSERT_TRUE(xrc_tgt_dies_with_xrcd_now(&dies));
  EXPECT_FALSE(dies);
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
