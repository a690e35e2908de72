// SPDX-License-Identifier: BSD-2-Clause
// The schedule's text form: what a person copies into a replay command must come back the same.
#include <gtest/gtest.h>

#include "emu/sched/schedule.h"

namespace emu::sched {
namespace {

TEST(Schedule, TextRoundTrips) {
  Schedule s{{0, 0, 0, 1, 2, 2, 0}};
  EXPECT_EQ(format_schedule(s), "s1:0x3,1,2x2,0");
  Schedule back;
  ASSERT_TRUE(parse_schedule(format_schedule(s), &back));
  EXPECT_EQ(back, s);
  ASSERT_TRUE(parse_schedule("s1:", &back));
  EXPECT_TRUE(back.choices.empty());
}

TEST(Schedule, MalformedTextIsRefused) {
  Schedule keep{{7}};
  for (const char* bad : {"", "s2:0", "s1:x3", "s1:0x", "s1:0x0", "s1:0,", "s1:,0", "s1:a",
                          "s1:65535", "s1:0x99999999999", "s1:1 x2"}) {
    EXPECT_FALSE(parse_schedule(bad, &keep)) << bad;
    EXPECT_EQ(keep, Schedule{{7}}) << bad;
  }
}

TEST(Schedule, PreemptionsCountOnlySwitchesAwayFromAnActorThatCouldGoOn) {
  std::vector<ChoiceRecord> rec = {
      {0, kNoActor, false},  // the start is no preemption
      {1, 0, true},          // 0 could go on: a preemption
      {1, 1, true},          // the same actor
      {0, 1, false},         // 1 could not go on (blocked or done): forced
  };
  EXPECT_EQ(count_preemptions(rec), 1u);
}

}  // namespace
}  // namespace emu::sched
