// SPDX-License-Identifier: BSD-2-Clause
// emu-stress's verbs objects, all in one process: an initiator context whose RC QPs post, and a
// target context on the same device whose RC QPs (one per initiator QP, connected by loopback
// through the port's LID or GID) receive. Targets have a context of their own so that they take
// none of the initiator context's doorbell registers: the initiator's QP i rings register
// i % EMU_UARS, as a program that only sends would see.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <vector>

namespace stress {

struct FabricConfig {
  std::string device;
  uint32_t qps = 1;
  uint32_t threads = 1;  // thread domains: one per thread that owns a QP (td)
  bool td = false;
  uint32_t sq_depth = 64;     // max_send_wr of an initiator QP
  uint32_t rq_depth = 128;    // max_recv_wr of a target QP
  uint32_t max_inline = 256;  // max_inline_data asked for
  size_t source_bytes = 0;    // registered on the initiator side (SGE payloads)
  size_t target_bytes = 0;    // registered on the target side (RDMA WRITE slots, receive buffers)
};

struct QpPair {
  ibv_qp* initiator = nullptr;
  ibv_cq* initiator_cq = nullptr;  // its send (and unused receive) completions
  ibv_qp* target = nullptr;
  ibv_cq* target_cq = nullptr;  // the target's receive completions
};

class Fabric {
 public:
  ~Fabric();
  // Opens, creates and connects everything; on failure returns false with the reason in *err.
  // *td_missing is set when ibv_alloc_td itself failed (the provider has no thread domains).
  bool setup(const FabricConfig& cfg, std::string* err, bool* td_missing);

  // Pair i back to RESET and connected again (both QPs, PSNs from 0): a fresh pair for the next
  // scheduled run without creating one. Its CQs keep what they hold (the caller drains them).
  bool reconnect(uint32_t i, std::string* err);

  ibv_context* initiator_ctx() const { return ictx_; }
  const std::vector<QpPair>& pairs() const { return pairs_; }
  uint8_t* source() const { return source_; }
  uint8_t* target() const { return target_; }
  uint32_t source_lkey() const { return source_mr_ ? source_mr_->lkey : 0; }
  uint32_t target_rkey() const { return target_mr_ ? target_mr_->rkey : 0; }
  uint32_t target_lkey() const { return target_mr_ ? target_mr_->lkey : 0; }

 private:
  bool open_contexts(const FabricConfig& cfg, std::string* err);
  bool make_thread_domains(const FabricConfig& cfg, std::string* err, bool* td_missing);
  bool make_pair(const FabricConfig& cfg, uint32_t i, std::string* err);
  bool connect(ibv_qp* qp, uint32_t dest_qpn, std::string* err);

  ibv_context* ictx_ = nullptr;
  ibv_context* tctx_ = nullptr;
  ibv_pd* ipd_ = nullptr;
  ibv_pd* tpd_ = nullptr;
  std::vector<ibv_td*> tds_;
  std::vector<ibv_pd*> parents_;  // parent domains: pd + one thread domain each
  uint8_t* source_ = nullptr;
  uint8_t* target_ = nullptr;
  size_t source_len_ = 0, target_len_ = 0;
  ibv_mr* source_mr_ = nullptr;
  ibv_mr* target_mr_ = nullptr;
  std::vector<QpPair> pairs_;
  uint8_t port_ = 1;
  ibv_port_attr port_attr_{};
  ibv_gid gid_{};
};

}  // namespace stress
