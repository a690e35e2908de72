// SPDX-License-Identifier: BSD-2-Clause
#include "run_state.h"

#include <cstring>

namespace race {

using emu::sched::Actor;
using emu::sched::Scenario;

Msg& RunState::add(uint32_t pair, uint32_t len) {
  uint32_t slot = 0;
  for (const Msg& m : msgs) slot += m.pair == pair;
  msgs.push_back({pair, slot, static_cast<uint8_t>('A' + msgs.size()), len});
  return msgs.back();
}

std::string RunState::check() {
  if (buffers && buffers->pending()) return "stores left in a buffer";
  std::string sig = rig->race_signature();
  if (!sig.empty()) return sig;
  if (drain) take_all();
  sig = ledger.check();
  if (!sig.empty()) return sig;
  for (const Msg& m : msgs) {
    sig = rig->payload_signature(m.pair, m.slot, m.fill, m.len);
    if (!sig.empty()) return sig;
  }
  return "";
}

int RunState::poll_ep(size_t ep) {
  uctlite::Completion c[8];
  int n = eps[ep]->poll(c, 8);
  for (int k = 0; k < n; ++k) {
    if (c[k].matched)
      ledger.complete(pairs[ep], c[k].wr_id);
    else
      ++ledger.unmatched;
  }
  return n;
}

void RunState::take_all() {
  for (size_t i = 0; i < eps.size(); ++i)
    while (poll_ep(i)) {
    }
  if (!eps.empty()) return;
  uint32_t index;
  for (uint32_t p : pairs)
    while (rig->raw(p).poll_one(&index)) ledger.complete(p, index);
}

Shared start(Rig& rig, const std::vector<uint32_t>& pairs) {
  auto s = std::make_shared<RunState>();
  s->rig = &rig;
  s->pairs = pairs;
  return s;
}

Scenario finish(const Shared& s, std::vector<Actor> actors) {
  Scenario sc;
  sc.actors = std::move(actors);
  sc.actors.push_back(s->rig->device().actor());
  sc.final_check = [s] { return s->check(); };
  return sc;
}

void uct_post(const Shared& s, size_t ep, size_t m, bool note_first) {
  const Msg& msg = s->msgs[m];
  uint8_t payload[kSlotBytes];
  std::memset(payload, msg.fill, msg.len);
  uctlite::PostArgs a;
  a.payload = payload;
  a.length = msg.len;
  a.raddr = s->rig->slot_addr(msg.pair, msg.slot);
  a.rkey = s->rig->rkey();
  a.wr_id = m;
  if (note_first) s->ledger.post(msg.pair, m);
  const bool posted = s->eps[ep]->post(a) == uctlite::PostStatus::ok;
  if (posted && !note_first) s->ledger.post(msg.pair, m);
  if (!posted && note_first)
    std::erase_if(s->ledger.posted,
                  [&](const Ledger::Entry& e) { return e.qp == msg.pair && e.key == m; });
}

}  // namespace race
