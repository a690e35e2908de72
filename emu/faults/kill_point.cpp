// SPDX-License-Identifier: BSD-2-Clause
#include "emu/kill_point.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace emu {
namespace {

constexpr const char* kNames[] = {
    "doorbell",       "qp_lock",       "cq_lock",      "srq_lock",    "bf_copy",   "heap_alloc",
    "heap_grow",      "slot_create",   "slot_destroy", "engine_lock", "recv_lock", "cm_req_sent",
    "cm_established", "recv_cqe_slot", "recv_cqe",     "event_raise",
};
static_assert(sizeof kNames / sizeof kNames[0] == static_cast<size_t>(KillPoint::count));

KillTarget g_target;
std::atomic<uint64_t> g_passes{0};  // passes of the chosen point only

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool parse_u64(const char* s, uint64_t* v) {
  if (!*s) return false;
  char* end;
  *v = std::strtoull(s, &end, 10);
  return *end == 0;
}

// Read before main, and before any other constructor of the program or library (one may already
// pass a point: a test's probe that attaches and allocates).
__attribute__((constructor(101))) void read_kill_at() {
  const char* text = std::getenv("EMU_KILL_AT");
  if (!text || !*text) return;
  // A malformed one arms nothing; the knob check (emu/config.h, knobs_refused) says so and fails
  // the first verb.
  if (!parse_kill_at(text, &g_target)) return;
  g_kill_armed = true;
}

}  // namespace

bool g_kill_armed = false;

const char* kill_point_name(KillPoint p) {
  return p < KillPoint::count ? kNames[static_cast<int>(p)] : "none";
}

bool parse_kill_at(const char* text, KillTarget* out) {
  char buf[128];
  if (std::strlen(text) >= sizeof buf) return false;
  std::strcpy(buf, text);
  char* arg = std::strchr(buf, ':');
  if (arg) *arg++ = 0;
  if (std::strcmp(buf, "random") == 0) {
    char* maxn_text = arg ? std::strchr(arg, ':') : nullptr;
    if (maxn_text) *maxn_text++ = 0;
    uint64_t seed, maxn = 64;
    if (!arg || !parse_u64(arg, &seed)) return false;
    if (maxn_text && (!parse_u64(maxn_text, &maxn) || maxn == 0)) return false;
    uint64_t r = splitmix64(seed);
    out->point = static_cast<KillPoint>(r % static_cast<uint64_t>(KillPoint::count));
    out->nth = 1 + splitmix64(r) % maxn;
    return true;
  }
  for (int i = 0; i < static_cast<int>(KillPoint::count); ++i) {
    if (std::strcmp(buf, kNames[i]) != 0) continue;
    uint64_t n = 1;
    if (arg && (!parse_u64(arg, &n) || n == 0)) return false;
    out->point = static_cast<KillPoint>(i);
    out->nth = n;
    return true;
  }
  return false;
}

void kill_point_hit(KillPoint p) {
  if (p != g_target.point) return;
  if (g_passes.fetch_add(1, std::memory_order_relaxed) + 1 != g_target.nth) return;
  // The sweep reads this line to know where the process died (one write: async-signal safe).
  char line[128];
  int n = std::snprintf(line, sizeof line, "rdmaemu: EMU_KILL_AT: pid %d killed at %s #%llu\n",
                        static_cast<int>(getpid()), kill_point_name(p),
                        static_cast<unsigned long long>(g_target.nth));
  if (n > 0) (void)!write(2, line, static_cast<size_t>(n));
  kill(getpid(), SIGKILL);
  for (;;) pause();
}

}  // namespace emu
