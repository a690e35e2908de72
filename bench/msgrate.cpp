// SPDX-License-Identifier: BSD-2-Clause
// bench/msgrate: the small-message rate of a verbs device, from a harness whose own clock does not
// dominate (perftest's ib_write_bw reads the clock for every message: ~40% of its client here).
// The client posts lists of `batch` WRs, all unsignaled but the last, and reads the clock once per
// batch; RDMA WRITE (inline) into a ring of slots at the server, or SEND (inline) into receives the
// server keeps posted ahead. Every message carries its sequence number, and the server checks
// them: each received SEND in order, or after the run the last value written into every slot.
//
// Usage: msgrate [-d DEV] [-p PORT] [-o write|send] [-n MSGS] [-b BATCH] [-s SIZE] [HOST]
//   (msgrate --help says more)
//   Without HOST: the server (listens on PORT); with HOST: the client, whose -o/-n/-b/-s rule.
//   The client prints its rate and, after the server's verdict, "PASS msgrate ..." (exit 0) or a
//   FAIL line (exit 1). Links to libibverbs only: run it under emu-run for emu0.
#include <infiniband/verbs.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "emu/cli.h"
#include "oob.h"

namespace {

struct Options {
  std::string device = "emu0";
  int port = 18600;
  std::string host;   // empty: the server
  bool send = false;  // SEND instead of RDMA WRITE
  uint64_t messages = 1000000;
  uint32_t batch = 64;
  uint32_t size = 8;
};

// What each side tells the other before the run (the client's run parameters win).
struct Address {
  uint32_t qpn, psn, rkey, slots;
  uint16_t lid;
  uint8_t gid[16];
  uint64_t addr;
  uint64_t messages;
  uint32_t batch, size, send;
};

// What the server answers after the run: how many messages it saw and whether their data held.
struct Verdict {
  uint64_t checked;
  uint32_t ok;
};

constexpr uint32_t kBatchesInFlight = 4;
constexpr uint32_t kReceivesAhead = 4096;
constexpr uint32_t kSlots = 4096;  // RDMA WRITE targets, one per sequence number modulo kSlots
constexpr uint32_t kPollBatch = 32;

double now_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// -1 when the run goes on, else the exit status (emu/cli.h's convention).
int parse(int argc, char** argv, Options& o) {
  CLI::App app(
      "the small-message rate of a verbs device: without HOST the server, with HOST the "
      "client, whose -o/-n/-b/-s rule",
      "msgrate");
  app.add_option("-d,--device", o.device, "the verbs device")->capture_default_str();
  app.add_option("-p,--port", o.port, "the TCP port of the exchange")
      ->check(emu::cli::in_range(1, 65535))
      ->capture_default_str();
  app.add_option_function<std::string>(
         "-o,--op", [&o](const std::string& v) { o.send = v == "send"; }, "write (default) or send")
      ->check(CLI::IsMember({"write", "send"}));
  app.add_option("-n,--messages", o.messages, "messages (rounded up to whole batches)")
      ->check(emu::cli::at_least(1))
      ->capture_default_str();
  app.add_option("-b,--batch", o.batch, "WRs per posted list")
      ->check(emu::cli::in_range(1, 1024))
      ->capture_default_str();
  app.add_option("-s,--size", o.size, "message size in bytes")
      ->check(emu::cli::in_range(8, 256))
      ->capture_default_str();
  app.add_option("HOST", o.host, "the server to connect to (the client)");
  const int status = emu::cli::parse(app, argc, argv);
  o.messages = (o.messages + o.batch - 1) / o.batch * o.batch;  // whole batches
  return status;
}

// The verbs objects of one side; the buffer holds the slots (server) or the payloads (client).
struct Side {
  std::vector<uint8_t> buf;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_mr* mr = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_port_attr port{};
  ibv_gid gid{};
};

bool open_side(const Options& o, Side& s, bool server) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list && i < n && !s.ctx; ++i)
    if (o.device == ibv_get_device_name(list[i])) s.ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  if (!s.ctx) {
    fprintf(stderr, "FAIL msgrate: no device %s\n", o.device.c_str());
    return false;
  }
  const uint32_t sq = o.batch * kBatchesInFlight;
  s.pd = ibv_alloc_pd(s.ctx);
  s.cq = s.pd ? ibv_create_cq(s.ctx, static_cast<int>(sq + kReceivesAhead), nullptr, nullptr, 0)
              : nullptr;
  if (!s.cq) return false;
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = s.cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {sq, server ? kReceivesAhead : 1, 1, 1, o.size};
  s.qp = ibv_create_qp(s.pd, &init);
  s.buf.assign(static_cast<size_t>(std::max(kSlots, kReceivesAhead)) * o.size, 0);
  s.mr = s.qp ? ibv_reg_mr(s.pd, s.buf.data(), s.buf.size(),
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
              : nullptr;
  if (!s.mr || ibv_query_port(s.ctx, 1, &s.port) || ibv_query_gid(s.ctx, 1, 0, &s.gid))
    return false;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  return ibv_modify_qp(s.qp, &a,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0;
}

Address local_address(const Options& o, const Side& s) {
  Address a{};
  a.qpn = s.qp->qp_num;
  a.psn = 0x1234;
  a.rkey = s.mr->rkey;
  a.slots = kSlots;
  a.lid = s.port.lid;
  memcpy(a.gid, s.gid.raw, sizeof a.gid);
  a.addr = reinterpret_cast<uintptr_t>(s.buf.data());
  a.messages = o.messages;
  a.batch = o.batch;
  a.size = o.size;
  a.send = o.send;
  return a;
}

bool connect_qp(Side& s, const Address& peer) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.dlid = peer.lid;
  if (peer.lid == 0) {  // an Ethernet link layer: addressed by GID
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, peer.gid, sizeof peer.gid);
    a.ah_attr.grh.hop_limit = 1;
  }
  if (ibv_modify_qp(s.qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return false;
  a.qp_state = IBV_QPS_RTS;
  a.retry_cnt = a.rnr_retry = 7;  // 7: RNR retried without limit
  a.timeout = 14;
  a.sq_psn = 0x1234;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(s.qp, &a,
                       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) == 0;
}

// Polls until `want` completions arrived; false on an error completion.
bool reap(ibv_cq* cq, uint32_t want) {
  ibv_wc wc[kPollBatch];
  while (want > 0) {
    const int n = ibv_poll_cq(cq, static_cast<int>(std::min(want, kPollBatch)), wc);
    if (n < 0) return false;
    for (int i = 0; i < n; ++i)
      if (wc[i].status != IBV_WC_SUCCESS) {
        fprintf(stderr, "FAIL msgrate: completion status %s\n", ibv_wc_status_str(wc[i].status));
        return false;
      }
    want -= static_cast<uint32_t>(n);
  }
  return true;
}

// The client's run: whole batches posted as one list, at most kBatchesInFlight outstanding; the
// clock is read once per batch, into `stamps`.
bool client_run(const Options& o, Side& s, const Address& peer, std::vector<double>& stamps) {
  std::vector<ibv_send_wr> wr(o.batch);
  std::vector<ibv_sge> sge(o.batch);
  for (uint32_t i = 0; i < o.batch; ++i) {
    sge[i] = {reinterpret_cast<uintptr_t>(&s.buf[i * o.size]), o.size, s.mr->lkey};
    wr[i] = {};
    wr[i].sg_list = &sge[i];
    wr[i].num_sge = 1;
    wr[i].opcode = o.send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE;
    wr[i].send_flags = IBV_SEND_INLINE | (i + 1 == o.batch ? IBV_SEND_SIGNALED : 0);
    wr[i].next = i + 1 < o.batch ? &wr[i + 1] : nullptr;
    wr[i].wr.rdma.rkey = peer.rkey;
  }
  const uint64_t batches = o.messages / o.batch;
  stamps.reserve(batches + 1);
  stamps.push_back(now_seconds());
  uint32_t in_flight = 0;
  for (uint64_t b = 0; b < batches; ++b) {
    for (uint32_t i = 0; i < o.batch; ++i) {
      const uint64_t seq = b * o.batch + i;
      memcpy(&s.buf[i * o.size], &seq, sizeof seq);  // inline: copied at post time
      wr[i].wr.rdma.remote_addr = peer.addr + (seq % peer.slots) * o.size;
    }
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(s.qp, wr.data(), &bad)) {
      fprintf(stderr, "FAIL msgrate: ibv_post_send of batch %llu\n", (unsigned long long)b);
      return false;
    }
    if (++in_flight == kBatchesInFlight) {
      if (!reap(s.cq, 1)) return false;
      --in_flight;
    }
    stamps.push_back(now_seconds());
  }
  const bool ok = reap(s.cq, in_flight);
  stamps.back() = now_seconds();
  return ok;
}

bool post_receives(Side& s, uint32_t first, uint32_t count, uint32_t size) {
  ibv_recv_wr wr[kPollBatch];
  ibv_sge sge[kPollBatch];
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t slot = (first + i) % kReceivesAhead;
    sge[i] = {reinterpret_cast<uintptr_t>(&s.buf[slot * size]), size, s.mr->lkey};
    wr[i] = {slot, i + 1 < count ? &wr[i + 1] : nullptr, &sge[i], 1};
  }
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(s.qp, wr, &bad) == 0;
}

// The server's part of a SEND run: every message received in order, carrying its sequence number.
uint64_t server_receive(Side& s, const Address& run) {
  for (uint32_t i = 0; i < kReceivesAhead; i += kPollBatch)
    if (!post_receives(s, i, kPollBatch, run.size)) return 0;
  ibv_wc wc[kPollBatch];
  uint64_t seq = 0;
  while (seq < run.messages) {
    const int n = ibv_poll_cq(s.cq, kPollBatch, wc);
    if (n < 0) return seq;
    for (int i = 0; i < n; ++i, ++seq) {
      uint64_t got;
      memcpy(&got, &s.buf[wc[i].wr_id * run.size], sizeof got);
      if (wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len != run.size || got != seq) {
        fprintf(stderr, "FAIL msgrate: receive %llu: status %d, %u bytes, carries %llu\n",
                (unsigned long long)seq, wc[i].status, wc[i].byte_len, (unsigned long long)got);
        return seq;
      }
    }
    if (n > 0 && !post_receives(s, static_cast<uint32_t>(wc[0].wr_id), n, run.size)) return seq;
  }
  return seq;
}

// After a WRITE run: every slot holds the last sequence number that mapped to it.
bool slots_hold_last_writes(const Side& s, const Address& run) {
  for (uint64_t k = 0; k < kSlots && k < run.messages; ++k) {
    const uint64_t last = k + (run.messages - 1 - k) / kSlots * kSlots;
    uint64_t got;
    memcpy(&got, &s.buf[k * run.size], sizeof got);
    if (got != last) {
      fprintf(stderr, "FAIL msgrate: slot %llu holds %llu, not %llu\n", (unsigned long long)k,
              (unsigned long long)got, (unsigned long long)last);
      return false;
    }
  }
  return true;
}

void report(const Options& o, const std::vector<double>& stamps) {
  std::vector<double> gaps;
  for (size_t i = 1; i < stamps.size(); ++i) gaps.push_back(stamps[i] - stamps[i - 1]);
  std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
  const double total = stamps.back() - stamps.front();
  printf(
      "msgrate %s %u B: %llu messages in %.4f s: %.3f Mmsg/s (median batch of %u: %.3f Mmsg/s)\n",
      o.send ? "send" : "write", o.size, (unsigned long long)o.messages, total,
      1e-6 * static_cast<double>(o.messages) / total, o.batch,
      1e-6 * o.batch / gaps[gaps.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const int status = parse(argc, argv, o);
  if (status >= 0) return status;
  const bool server = o.host.empty();
  signal(SIGPIPE, SIG_IGN);  // a peer that ended is reported by the exchange, not a signal
  const int fd = bench::oob_connect(server ? nullptr : o.host.c_str(), o.port);
  Side s;
  if (fd < 0 || !open_side(o, s, server)) {
    fprintf(stderr, "FAIL msgrate: setting up %s\n", o.device.c_str());
    return 1;
  }
  Address peer{};
  const Address mine = local_address(o, s);
  if (!bench::oob_exchange(fd, &mine, &peer, sizeof mine) || !connect_qp(s, peer)) {
    fprintf(stderr, "FAIL msgrate: connecting the QPs\n");
    return 1;
  }
  const Address& run = server ? peer : mine;  // the client's parameters
  std::vector<double> stamps;
  Verdict v{}, theirs{};
  if (server) {
    v.checked = run.send ? server_receive(s, run) : 0;
    v.ok = run.send ? v.checked == run.messages : 1;
    // A client with unlimited RNR retries would wait for receives that never come: end at once,
    // so the client's QP sees its peer gone.
    if (!v.ok) return 1;
  } else {
    v.ok = client_run(o, s, peer, stamps);
    v.checked = o.messages;
  }
  // The server checks a WRITE run's slots once the client's last completion is in.
  Verdict done{};
  if (!bench::oob_exchange(fd, &v, &theirs, sizeof v)) return 1;
  if (server && !run.send) {
    v.ok = slots_hold_last_writes(s, run);
    v.checked = v.ok ? run.messages : 0;
  }
  if (!bench::oob_exchange(fd, &v, &done, sizeof v)) return 1;
  if (!server && v.ok) report(o, stamps);
  const Verdict& server_says = server ? v : done;
  const bool ok = v.ok && theirs.ok && server_says.ok && server_says.checked == run.messages;
  printf("%s msgrate %s %s: %llu messages checked\n", ok ? "PASS" : "FAIL",
         run.send ? "send" : "write", server ? "server" : "client",
         (unsigned long long)server_says.checked);
  ibv_destroy_qp(s.qp);
  ibv_dereg_mr(s.mr);
  ibv_destroy_cq(s.cq);
  ibv_dealloc_pd(s.pd);
  ibv_close_device(s.ctx);
  close(fd);
  return ok ? 0 : 1;
}
