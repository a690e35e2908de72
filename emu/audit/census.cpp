// SPDX-License-Identifier: BSD-2-Clause
#include "emu/census.h"

#include <cstdio>

#include "emu/config.h"
#include "emu/staging.h"

namespace emu {
namespace {

const char* qp_state_name(uint32_t s) {
  static const char* const kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return s < 7 ? kNames[s] : "?";
}

const char* qp_type_name(uint8_t t) {
  switch (t) {
    case kQptRc:
      return "RC";
    case kQptUc:
      return "UC";
    case kQptUd:
      return "UD";
    case kQptXrcSend:
      return "XRC_SEND";
    case kQptXrcRecv:
      return "XRC_RECV";
    case kQptRaw:
      return "RAW_PACKET";
    case kQptDci:
      return "DCI";
    case kQptDct:
      return "DCT";
  }
  return "?";
}

const char* policy_name(uint32_t p) {
  return p == kXrcPolicyXrcd ? "xrcd" : p == kXrcPolicyCreator ? "creator" : "kernel";
}

// Whether the process recorded as (pid, start time) still runs.
bool runs(int pid, uint64_t start) { return pid > 0 && pid_matches(pid, start); }

struct Owner {
  int pid = 0;
  bool alive = false;
};

Owner owner_of(const Header* h, uint32_t proc) {
  Owner o;
  if (proc >= kMaxProcs) return o;
  const ProcRecord& r = h->procs[proc];
  if (r.state.load(std::memory_order_acquire) == kProcFree) return o;
  o.pid = r.pid;
  o.alive = r.state.load() == kProcAlive && runs(r.pid, r.start_time);
  return o;
}

template <class Slot>
bool present(const Slot& s, bool* dying) {
  uint32_t st = s.state.load(std::memory_order_acquire);
  *dying = st == kSlotDying;
  return st == kSlotLive || st == kSlotDying;
}

CensusHandle handle_of(const Header* h, uint32_t i) {
  const XrcHandle& x = h->xrc_handles[i];
  Owner o = owner_of(h, x.owner);
  return CensusHandle{i, o.pid, o.alive, x.ctx};
}

// The live XRC handles of `kind` to object `object` (a domain's openers, a TGT QP's holders).
std::vector<CensusHandle> handles_to(const Header* h, uint32_t kind, uint32_t object) {
  std::vector<CensusHandle> v;
  for (uint32_t k = 0; k < kMaxXrcHandles; ++k) {
    const XrcHandle& x = h->xrc_handles[k];
    if (x.state.load(std::memory_order_acquire) == kSlotLive && x.kind == kind &&
        x.object == object)
      v.push_back(handle_of(h, k));
  }
  return v;
}

void json_str(std::string* out, const std::string& s) {
  *out += '"';
  for (char c : s) {
    if (c == '"' || c == '\\') *out += '\\';
    *out += c;
  }
  *out += '"';
}

std::string handles_json(const std::vector<CensusHandle>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    char b[160];
    std::snprintf(b, sizeof b, "%s{\"handle\":%u,\"pid\":%d,\"alive\":%s,\"ctx\":%u}", i ? "," : "",
                  v[i].index, v[i].pid, v[i].alive ? "true" : "false", v[i].ctx);
    o += b;
  }
  return o + "]";
}

std::string object_json(const CensusObject& x) {
  std::string o = "{\"kind\":";
  json_str(&o, x.kind);
  char b[200];
  std::snprintf(b, sizeof b,
                ",\"index\":%u,\"dev\":%u,\"number\":%llu,\"owner_pid\":%d,"
                "\"owner_alive\":%s,\"dying\":%s,\"sq_pending\":%u,\"type\":",
                x.index, x.dev, static_cast<unsigned long long>(x.number), x.owner_pid,
                x.owner_alive ? "true" : "false", x.dying ? "true" : "false", x.sq_pending);
  o += b;
  json_str(&o, x.type);
  o += ",\"state\":";
  json_str(&o, x.state);
  return o + "}";
}

}  // namespace

namespace {

// Adds objects to a census, with their owners looked up.
struct CensusBuilder {
  Segment* seg;
  const Header* h;
  Census* c;

  void add(const char* kind, uint32_t i, uint32_t dev, uint64_t number, uint32_t owner,
           std::string type, std::string state, bool dying) {
    Owner o = owner_of(h, owner);
    c->objects.push_back(
        {kind, i, dev, number, std::move(type), std::move(state), o.pid, o.alive, dying});
  }
  uint32_t dev_of_ctx(uint32_t ctx) const { return ctx < kMaxContexts ? h->ctxs[ctx].dev : 0; }

  void procs();
  void contexts_pds_mrs();
  void cqs_srqs();
  void qps();
  void tgt_qp(const QpSlot& q, uint32_t i, bool dying);
  void xrcds();
  void dead_owned_and_locks();
  void heap_and_races();
};

void CensusBuilder::procs() {
  for (uint32_t i = 0; i < kMaxProcs; ++i) {
    const ProcRecord& r = h->procs[i];
    if (r.state.load(std::memory_order_acquire) == kProcFree) continue;
    c->procs.push_back({i, r.pid, r.state.load() == kProcAlive && runs(r.pid, r.start_time)});
  }
}

void CensusBuilder::contexts_pds_mrs() {
  bool dying = false;
  for (uint32_t i = 0; i < kMaxContexts; ++i)
    if (present(h->ctxs[i], &dying))
      add("context", i, h->ctxs[i].dev, i, h->ctxs[i].owner, "", "", dying);
  for (uint32_t i = 0; i < table_end(h->pd_dir); ++i)
    if (present(pd_slot(h, i), &dying))
      add("pd", i, dev_of_ctx(pd_slot(h, i).ctx), i, pd_slot(h, i).owner, "", "", dying);
  for (uint32_t i = 0; i < table_end(h->mr_dir); ++i)
    if (present(mr_slot(h, i), &dying)) {
      const MrSlot& m = mr_slot(h, i);
      uint32_t ctx = pd_at(h, m.pd) ? pd_at(h, m.pd)->ctx : 0;
      // SHARED: engines in other processes reach it through a mapping (share_len, layout.h).
      add("mr", i, dev_of_ctx(ctx), m.key, m.owner, m.share_len ? "SHARED" : "", "", dying);
    }
}

void CensusBuilder::cqs_srqs() {
  bool dying = false;
  for (uint32_t i = 0; i < table_end(h->cq_dir); ++i)
    if (present(cq_slot(h, i), &dying)) {
      const CqSlot& cq = cq_slot(h, i);
      // A CQ with a receive staging area: its slots holding payloads not yet polled.
      uint64_t off = cq.staging_off.load(std::memory_order_acquire);
      std::string staged =
          off ? "STAGED " + std::to_string(staging_taken(seg->at<StagingArea>(off))) : "";
      add("cq", i, cq.dev, i, cq.owner, "", staged.c_str(), dying);
    }
  for (uint32_t i = 0; i < table_end(h->srq_dir); ++i)
    if (present(srq_slot(h, i), &dying))
      add("srq", i, srq_slot(h, i).dev, srq_slot(h, i).srqn, srq_slot(h, i).owner,
          srq_slot(h, i).xrcd_ref ? "XRC" : "BASIC", "", dying);
}

// A TGT QP is its creator's only by name: the creator as it was recorded, and the handles that
// hold the QP.
void CensusBuilder::tgt_qp(const QpSlot& q, uint32_t i, bool dying) {
  bool alive = runs(q.creator_pid, q.creator_start);
  c->objects.push_back({"qp", i, q.dev, q.qpn, "XRC_RECV", qp_state_name(q.qp_state.load()),
                        q.creator_pid, alive, dying});
  if (dying) return;
  CensusTgtQp t{q.qpn,
                q.xrcd_ref ? q.xrcd_ref - 1 : 0,
                qp_state_name(q.qp_state.load()),
                q.handles.load(),
                q.dies_with_xrcd != 0,
                q.creator_pid,
                alive,
                !alive,
                {}};
  t.holders = handles_to(h, kHandleTgtQp, i);
  c->tgt_qps.push_back(std::move(t));
}

void CensusBuilder::qps() {
  bool dying = false;
  for (uint32_t i = 0; i < table_end(h->qp_dir); ++i) {
    const QpSlot& q = qp_slot(h, i);
    if (!present(q, &dying)) continue;
    if (q.type == kQptXrcRecv) {
      tgt_qp(q, i, dying);
      continue;
    }
    add("qp", i, q.dev, q.qpn, q.owner, qp_type_name(q.type), qp_state_name(q.qp_state.load()),
        dying);
    if (!dying && q.dbrec_off) {
      // The driver's send counter (big-endian, 16 bits) against the device's next block.
      uint32_t posted = __builtin_bswap32(static_cast<const uint32_t*>(seg->at(q.dbrec_off))[1]);
      c->objects.back().sq_pending = (posted - q.sq_ci) & 0xffff;
    }
  }
}

void CensusBuilder::xrcds() {
  for (uint32_t i = 0; i < kMaxXrcds; ++i) {
    const XrcdSlot& d = h->xrcds[i];
    if (d.state.load(std::memory_order_acquire) != kSlotLive) continue;
    Owner o = owner_of(h, d.owner);
    bool shared = d.inode_dev || d.inode;
    CensusXrcd x{i,
                 d.dev,
                 shared,
                 shared ? d.inode_dev - 1 : 0,
                 d.inode,
                 policy_name(d.policy),
                 d.opens.load(),
                 d.objects.load(),
                 o.pid,
                 o.alive,
                 {}};
    x.openers = handles_to(h, kHandleXrcd, i);
    c->xrcds.push_back(std::move(x));
  }
}

void CensusBuilder::dead_owned_and_locks() {
  // Owned by the dead and kept by nothing: a TGT QP is kept by its handles or its domain's policy,
  // every other object has no business outliving its process once the sweep has seen it die.
  for (const CensusObject& o : c->objects)
    if (!o.owner_alive && !(o.kind == "qp" && o.type == "XRC_RECV")) c->dead_owned.push_back(o);
  auto held_by_dead = [&](const ShmLock& l) {
    uint32_t w = l.word.load(std::memory_order_relaxed);
    if (w != 0 && !proc_slot_alive(w - 1)) ++c->locks_held_by_dead;
  };
  held_by_dead(h->table_lock);
  held_by_dead(h->atomic_lock);
  held_by_dead(h->xrc_lock);
  each_qp(h, [&](const QpSlot& q) {
    held_by_dead(q.sq_engine);
    held_by_dead(q.rq_lock);
  });
  each_srq(h, [&](const SrqSlot& s) { held_by_dead(s.lock); });
}

void CensusBuilder::heap_and_races() {
  HeapAudit heap = seg->audit_heap(false, true);
  if (heap.done) {
    c->leaked_heap_blocks = static_cast<int64_t>(heap.leaked_blocks);
    c->leaked_heap_bytes = heap.leaked_bytes;
  }
  c->races_total = races_recorded(seg);
  for (uint32_t d = 0; d < h->num_devices; ++d) {
    std::vector<uint64_t>& row = c->race_counts.emplace_back(kRaceKinds, 0);
    for (uint32_t k = 0; k < kRaceKinds; ++k) row[k] = h->races.counts[d][k].load();
  }
  c->races = read_races(seg);
}

}  // namespace

Census take_census(Segment* seg) {
  Census c;
  c.fabric = config().fabric;
  CensusBuilder b{seg, seg->hdr(), &c};
  b.procs();
  b.contexts_pds_mrs();
  b.cqs_srqs();
  b.qps();
  b.xrcds();
  b.dead_owned_and_locks();
  b.heap_and_races();
  return c;
}

std::string census_text(const Census& c) {
  std::string o = "fabric " + c.fabric + "\n";
  char b[256];
  o += "processes:\n";
  for (const CensusProc& p : c.procs) {
    std::snprintf(b, sizeof b, "  pid %d %s\n", p.pid, p.alive ? "alive" : "DEAD");
    o += b;
  }
  o += "objects:\n";
  for (const CensusObject& x : c.objects) {
    std::snprintf(b, sizeof b, "  emu%u %-7s %-6u number 0x%llx%s%s%s%s owner pid %d %s%s\n", x.dev,
                  x.kind.c_str(), x.index, static_cast<unsigned long long>(x.number),
                  x.type.empty() ? "" : " type ", x.type.c_str(), x.state.empty() ? "" : " state ",
                  x.state.c_str(), x.owner_pid, x.owner_alive ? "alive" : "DEAD",
                  x.dying ? " (dying)" : "");
    o += b;
  }
  o += "xrc domains:\n";
  for (const CensusXrcd& d : c.xrcds) {
    if (d.shared)
      std::snprintf(b, sizeof b, "  xrcd %u emu%u inode %llu:%llu", d.index, d.dev,
                    static_cast<unsigned long long>(d.inode_dev),
                    static_cast<unsigned long long>(d.inode));
    else
      std::snprintf(b, sizeof b, "  xrcd %u emu%u private", d.index, d.dev);
    o += b;
    std::snprintf(b, sizeof b, " policy %s opens %u objects %u creator pid %d %s\n",
                  d.policy.c_str(), d.opens, d.objects, d.creator_pid,
                  d.creator_alive ? "alive" : "DEAD");
    o += b;
    for (const CensusHandle& x : d.openers) {
      std::snprintf(b, sizeof b, "    opened by pid %d %s\n", x.pid, x.alive ? "alive" : "DEAD");
      o += b;
    }
  }
  o += "xrc tgt qps:\n";
  for (const CensusTgtQp& t : c.tgt_qps) {
    std::snprintf(b, sizeof b, "  qpn 0x%06x xrcd %u state %s handles %u%s creator pid %d %s%s\n",
                  t.qpn, t.xrcd, t.state.c_str(), t.handles,
                  t.dies_with_xrcd ? " (bound to its domain)" : "", t.creator_pid,
                  t.creator_alive ? "alive" : "gone", t.orphaned ? " ORPHANED" : "");
    o += b;
    for (const CensusHandle& x : t.holders) {
      std::snprintf(b, sizeof b, "    handle held by pid %d %s\n", x.pid,
                    x.alive ? "alive" : "DEAD");
      o += b;
    }
  }
  std::snprintf(b, sizeof b, "owned by dead processes (not kept by a policy): %zu\n",
                c.dead_owned.size());
  o += b;
  std::snprintf(b, sizeof b, "leaked heap blocks: %lld (%llu bytes)\nlocks held by the dead: %u\n",
                static_cast<long long>(c.leaked_heap_blocks),
                static_cast<unsigned long long>(c.leaked_heap_bytes), c.locks_held_by_dead);
  o += b;
  std::snprintf(b, sizeof b, "race events: %llu\n", static_cast<unsigned long long>(c.races_total));
  o += b;
  for (size_t d = 0; d < c.race_counts.size(); ++d)
    for (uint32_t k = 1; k < kRaceKinds; ++k)
      if (c.race_counts[d][k]) {
        std::snprintf(b, sizeof b, "  emu%zu %s %llu\n", d, race_kind_name(k),
                      static_cast<unsigned long long>(c.race_counts[d][k]));
        o += b;
      }
  return o;
}

std::string census_json(const Census& c) {
  std::string o = "{\"fabric\":";
  json_str(&o, c.fabric);
  o += ",\"processes\":[";
  char b[512];
  for (size_t i = 0; i < c.procs.size(); ++i) {
    std::snprintf(b, sizeof b, "%s{\"pid\":%d,\"alive\":%s}", i ? "," : "", c.procs[i].pid,
                  c.procs[i].alive ? "true" : "false");
    o += b;
  }
  o += "],\"objects\":[";
  for (size_t i = 0; i < c.objects.size(); ++i) o += (i ? "," : "") + object_json(c.objects[i]);
  o += "],\"xrcds\":[";
  for (size_t i = 0; i < c.xrcds.size(); ++i) {
    const CensusXrcd& d = c.xrcds[i];
    std::snprintf(b, sizeof b,
                  "%s{\"index\":%u,\"dev\":%u,\"shared\":%s,\"inode_dev\":%llu,"
                  "\"inode\":%llu,\"policy\":\"%s\",\"opens\":%u,\"objects\":%u,"
                  "\"creator_pid\":%d,\"creator_alive\":%s,\"openers\":",
                  i ? "," : "", d.index, d.dev, d.shared ? "true" : "false",
                  static_cast<unsigned long long>(d.inode_dev),
                  static_cast<unsigned long long>(d.inode), d.policy.c_str(), d.opens, d.objects,
                  d.creator_pid, d.creator_alive ? "true" : "false");
    o += b + handles_json(d.openers) + "}";
  }
  o += "],\"tgt_qps\":[";
  for (size_t i = 0; i < c.tgt_qps.size(); ++i) {
    const CensusTgtQp& t = c.tgt_qps[i];
    std::snprintf(b, sizeof b,
                  "%s{\"qpn\":%u,\"xrcd\":%u,\"state\":\"%s\",\"handles\":%u,"
                  "\"dies_with_xrcd\":%s,\"creator_pid\":%d,\"creator_alive\":%s,"
                  "\"orphaned\":%s,\"holders\":",
                  i ? "," : "", t.qpn, t.xrcd, t.state.c_str(), t.handles,
                  t.dies_with_xrcd ? "true" : "false", t.creator_pid,
                  t.creator_alive ? "true" : "false", t.orphaned ? "true" : "false");
    o += b + handles_json(t.holders) + "}";
  }
  o += "],\"dead_owned\":[";
  for (size_t i = 0; i < c.dead_owned.size(); ++i)
    o += (i ? "," : "") + object_json(c.dead_owned[i]);
  o += "],\"leaked_heap_blocks\":" + std::to_string(c.leaked_heap_blocks) +
       ",\"leaked_heap_bytes\":" + std::to_string(c.leaked_heap_bytes) +
       ",\"locks_held_by_dead\":" + std::to_string(c.locks_held_by_dead);
  o += ",\"races\":{\"total\":" + std::to_string(c.races_total) + ",\"by_device\":[";
  for (size_t d = 0; d < c.race_counts.size(); ++d) {
    o += d ? ",{" : "{";
    for (uint32_t k = 1; k < kRaceKinds; ++k)
      o += std::string(k > 1 ? "," : "") + "\"" + race_kind_name(k) +
           "\":" + std::to_string(c.race_counts[d][k]);
    o += "}";
  }
  o += "],\"events\":[";
  for (size_t i = 0; i < c.races.size(); ++i) o += (i ? "," : "") + race_json(c.races[i]);
  return o + "]}}\n";
}

}  // namespace emu
