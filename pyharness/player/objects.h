// SPDX-License-Identifier: BSD-2-Clause
// A player's verbs objects, each under a small integer handle that its replies name, and the verbs
// steps over them. Every step returns 0 or the errno of the verb that failed (and fills `out` with
// the step's values as key=value words).
#pragma once
#include <infiniband/verbs.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace player {

enum class Kind { kPd, kMr, kCq, kSrq, kQp, kXrcd };  // in the order of objects.cpp's kRelease

struct Object {
  Kind kind;
  void* ptr;
  void* buf = nullptr;  // an MR's memory
};

using Values = std::vector<std::pair<std::string, long>>;

class Objects {
 public:
  // Opens the device by name (the player's one context) and reads port 1's LID.
  int open(const std::string& dev, Values* out);
  int alloc_pd(Values* out);
  int reg_mr(int pd, size_t len, Values* out);
  int create_cq(int depth, Values* out);
  int create_srq(int pd, int depth, Values* out);  // a basic SRQ
  // An XRC SRQ on the domain, completing into cq, with `recvs` receives of 64 bytes from mr.
  int create_xrc_srq(int xrcd, int pd, int cq, int mr, int recvs, Values* out);
  // type: rc, uc, ud, xrc_send (INI) need pd and CQs; xrc_recv (TGT) needs xrcd only. srq -1: none.
  int create_qp(const std::string& type, int pd_or_xrcd, int send_cq, int recv_cq, int srq,
                Values* out);
  int open_xrcd(const std::string& path, int oflags, Values* out);
  int open_qp(int xrcd, uint32_t qpn, Values* out);
  // To RTS with the peer (lid, qpn) from RESET or INIT; UD ignores the peer. timeout/retry: the RC
  // requester's.
  int to_rts(int qp, uint16_t lid, uint32_t qpn, uint8_t timeout, uint8_t retry);
  // One SEND of `len` bytes from mr with immediate `tag` (XRC INI: to SRQ srqn; UD: unsupported);
  // lkey_delta != 0 sends with an lkey that names no MR (a probe of the error path).
  int post_send(int qp, int mr, uint32_t srqn, uint32_t tag, uint32_t len, uint32_t lkey_delta);
  // One state change with nothing else asked: "init" (from RESET, port 1 and full access), "err" or
  // "reset" (from any state).
  int modify_state(int qp, const std::string& state);
  // One signalled RDMA WRITE of 16 bytes from mr to the same address under mr's rkey + rkey_delta
  // at the peer (a delta that names no MR there: a probe of the responder's access check).
  int post_write(int qp, int mr, uint32_t rkey_delta);
  // The async events pending on the context, read without blocking and acknowledged: n, then
  // event_i (enum ibv_event_type) of each in order.
  int async_events(Values* out);
  // The QP's state, the state it reports as current, and the queue sizes it reports.
  int query_qp(int qp, Values* out);
  int post_recv(int qp, int mr, int count);
  // Up to max completions within ms milliseconds: n, then status_i and imm_i of each.
  int poll(int cq, int max, int ms, Values* out);
  // Up to max completions in at most `tries` calls of ibv_poll_cq (no clock): as poll.
  int poll_tries(int cq, int max, int tries, Values* out);
  int destroy(int handle);

 private:
  template <class T>
  T* get(int h, Kind k) const {
    auto it = objs_.find(h);
    return it != objs_.end() && it->second.kind == k ? static_cast<T*>(it->second.ptr) : nullptr;
  }
  int add(Kind k, void* p, Values* out, void* buf = nullptr);

  ibv_context* ctx_ = nullptr;
  std::map<int, Object> objs_;
  int next_ = 1;
  std::vector<int> files_;  // the domains' files, open while the player lives
};

}  // namespace player
