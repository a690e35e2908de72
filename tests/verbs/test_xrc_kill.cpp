// SPDX-License-Identifier: BSD-2-Clause
// The XRC kill test (issue 4): creator, opener and sender players run a scenario of every XRC
// lifetime step while one or two of them are SIGKILLed at a random step (between two steps, or
// right after a command was sent, so inside a verb). Then: every survivor still answers (each
// wait has a deadline), the census (taken by a process whose attach sweeps the dead first) shows
// nothing of the dead except TGT QPs the policy keeps on purpose, and once the survivors have
// exited too, nothing at all.
//
// EMU_XRC_KILL_ITERATIONS (default 200) and EMU_XRC_KILL_SEED (default: random, printed) repeat a
// run. Label xrc_kill.
#include <fcntl.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>

#include "verbs_fixture.h"
#include "xrc_players.h"

namespace vt {
namespace {

struct Policy {
  const char* policy;
  const char* lifetime;
};
const Policy kPolicies[] = {
    {"kernel", "process"}, {"xrcd", "process"}, {"creator", "process"}, {"creator", "xrcd"}};

long env_long(const char* name, long dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtol(v, nullptr, 0) : dflt;
}

enum Who { kCreator, kOpener, kSender, kPlayers };
const char* const kWhoName[] = {"creator", "opener", "sender"};

// What the census may show while some players are dead and the others live on.
void check_census_mid(const CensusView& c, const std::string& where) {
  ASSERT_TRUE(c.ok) << where;
  EXPECT_EQ(c.dead_owned, 0u) << where << c.json;
  EXPECT_EQ(c.leaked_heap_blocks, 0) << where << "heap blocks leaked by the dead\n" << c.json;
  for (const CensusView::Tgt& t : c.tgts) {
    bool live_holder = false;
    for (bool a : t.holder_alive) {
      EXPECT_TRUE(a) << where << "TGT QP held by the dead\n" << c.json;
      live_holder |= a;
    }
    if (live_holder) continue;
    // No handle: only a QP bound to its domain may stay, and only while the domain is open.
    EXPECT_TRUE(t.dies_with_xrcd) << where << "TGT QP without handles\n" << c.json;
    bool domain_open = false;
    for (const CensusView::Xrcd& d : c.xrcds)
      if (d.index == t.xrcd) domain_open = d.opens > 0;
    EXPECT_TRUE(domain_open) << where << "kept TGT QP of a closed domain\n" << c.json;
  }
  for (const CensusView::Xrcd& d : c.xrcds) {
    for (bool a : d.opener_alive)
      EXPECT_TRUE(a) << where << "domain opened by the dead\n" << c.json;
    EXPECT_TRUE(d.opens > 0 || d.objects > 0) << where << "unused domain\n" << c.json;
  }
}

TEST(XrcKill, RandomKills) {
  signal(SIGPIPE, SIG_IGN);
  long iterations = env_long("EMU_XRC_KILL_ITERATIONS", 200);
  uint64_t seed = static_cast<uint64_t>(env_long("EMU_XRC_KILL_SEED", 0));
  if (!seed) seed = std::random_device{}() | 1;
  std::printf("EMU_XRC_KILL_SEED=%llu EMU_XRC_KILL_ITERATIONS=%ld\n",
              static_cast<unsigned long long>(seed), iterations);
  std::fflush(stdout);
  RecordProperty("seed", std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto t0 = std::chrono::steady_clock::now();
  long kills = 0;  // processes SIGKILLed as victims (the kill sweep counts them)

  for (long it = 0; it < iterations && !HasFailure(); ++it) {
    const Policy& pol = kPolicies[rng() % 4];
    DomainFile file;
    ASSERT_FALSE(file.path.empty());
    Player p[kPlayers];
    for (Player& x : p) ASSERT_TRUE(x.start()) << "iteration " << it;
    long tgt = -1, srqn = -1, ini = -1, lid = -1;
    bool sent_ok = false;
    // The scenario: one step per entry, run by one player; a step whose inputs a dead player
    // never produced is skipped. Any reply is acceptable (a step may fail because of a death);
    // no reply is not.
    struct Step {
      Who who;
      std::function<std::string()> cmd;  // "" to skip
      std::function<void(const Reply&)> got;
    };
    auto num = [](long v) { return std::to_string(v); };
    auto none = [](const Reply&) {};
    const Step steps[] = {
        {kCreator, [&] { return std::string("setenv EMU_XRC_POLICY ") + pol.policy; }, none},
        {kCreator, [&] { return std::string("setenv EMU_XRC_TGT_LIFETIME ") + pol.lifetime; },
         none},
        {kCreator, [&] { return "open_xrcd " + file.path + " " + num(O_CREAT); }, none},
        {kCreator, [&] { return std::string("create_tgt"); },
         [&](const Reply& r) {
           if (r.ok()) tgt = r.val(0);
         }},
        {kOpener, [&] { return "open_xrcd " + file.path + " 0"; }, none},
        {kOpener, [&] { return std::string("create_srq 4"); },
         [&](const Reply& r) {
           if (r.ok()) srqn = r.val(0);
         }},
        {kSender, [&] { return std::string("create_ini"); },
         [&](const Reply& r) {
           if (r.ok()) {
             ini = r.val(0);
             lid = r.val(1);
           }
         }},
        {kCreator,
         [&] { return tgt < 0 || ini < 0 ? "" : "connect_tgt " + num(lid) + " " + num(ini); },
         none},
        {kSender, [&] { return tgt < 0 ? "" : "connect_ini " + num(lid) + " " + num(tgt); }, none},
        {kOpener, [&] { return tgt < 0 ? "" : "open_qp " + num(tgt); }, none},
        {kSender, [&] { return srqn < 0 ? "" : "send " + num(srqn) + " 1"; },
         [&](const Reply& r) { sent_ok = r.ok() && r.val(0) == IBV_WC_SUCCESS; }},
        {kOpener, [&] { return "poll 1 " + num(sent_ok ? 2000 : 0); }, none},
        {kCreator, [&] { return std::string("destroy_tgt"); }, none},
        {kSender, [&] { return srqn < 0 ? "" : "send " + num(srqn) + " 2"; }, none},
        {kOpener, [&] { return std::string("destroy_tgt"); }, none},
        {kOpener, [&] { return std::string("destroy_srq"); }, none},
        {kOpener, [&] { return std::string("close_xrcd"); }, none},
        {kCreator, [&] { return std::string("close_xrcd"); }, none},
    };
    constexpr size_t kSteps = sizeof steps / sizeof steps[0];
    // Kill at step k (2 .. kSteps: after the policy is set, up to after the last step).
    size_t kill_at = 2 + rng() % (kSteps - 1);
    bool victim[kPlayers] = {};
    victim[rng() % kPlayers] = true;
    if (rng() % 4 == 0) victim[rng() % kPlayers] = true;
    bool mid_verb = rng() % 2;
    std::string where = "iteration " + num(it) + " (policy " + pol.policy + "/" + pol.lifetime +
                        ", kill at step " + num(static_cast<long>(kill_at)) +
                        (mid_verb ? " inside the step" : " before the step") + ", victims";
    for (int w = 0; w < kPlayers; ++w)
      if (victim[w]) where += std::string(" ") + kWhoName[w];
    where += "): ";

    auto kill_victims = [&] {
      for (int w = 0; w < kPlayers; ++w)
        if (victim[w] && p[w].alive()) {  // counted only when a process died of it
          p[w].kill_now();
          ++kills;
        }
    };
    for (size_t s = 0; s <= kSteps; ++s) {
      // Inside a step only when the step's own player is a victim; otherwise before the step.
      bool inside = mid_verb && s < kSteps && victim[steps[s].who];
      if (s == kill_at && !inside) kill_victims();
      if (s == kSteps) break;
      Player& who = p[steps[s].who];
      std::string cmd = steps[s].cmd();
      bool skipped = !who.alive() || cmd.empty();
      if (s == kill_at && inside) {
        // Inside the step: the command is on its way (or being run) when the SIGKILL comes. A
        // step skipped still kills, before the next: every iteration kills (the sweep counts on
        // it).
        if (!skipped) {
          ASSERT_TRUE(who.send_only(cmd)) << where;
        }
        kill_victims();
        continue;
      }
      if (skipped) continue;
      Reply r = who.call(cmd);
      ASSERT_TRUE(r.answered) << where << kWhoName[steps[s].who] << " did not answer '" << cmd
                              << "'";
      steps[s].got(r);
    }
    for (int w = 0; w < kPlayers; ++w)
      if (p[w].alive()) {
        ASSERT_TRUE(p[w].call("ping").ok()) << where << kWhoName[w] << " hangs";
      }
    ASSERT_NO_FATAL_FAILURE(check_census_mid(take_census_view(), where));
    // The survivors go too (exit or SIGKILL); then nothing of this iteration may remain.
    for (Player& x : p) {
      if (!x.alive()) continue;
      if (rng() % 2) {
        x.kill_now();
      } else {
        ASSERT_TRUE(x.exit_normally()) << where;
      }
    }
    CensusView c = take_census_view();
    ASSERT_TRUE(c.ok) << where;
    EXPECT_TRUE(c.objects.empty()) << where << "left after every process went\n" << c.json;
    EXPECT_TRUE(c.xrcds.empty()) << where << c.json;
    EXPECT_TRUE(c.tgts.empty()) << where << c.json;
    EXPECT_EQ(c.leaked_heap_blocks, 0) << where << c.json;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%ld iterations in %.1f s\nXRC kills %ld\n", iterations, secs, kills);
}

}  // namespace
}  // namespace vt
