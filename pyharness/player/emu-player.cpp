// SPDX-License-Identifier: BSD-2-Clause
// emu-player: a process that runs verbs steps on command for the Python harness (players.py). It
// reads one command per line on stdin and answers each with one line on stdout:
//   ok [key=value ...]      the step's values (handles, qpn, lid, completions)
//   err ERRNO what          the verb's errno
// Commands (handles are the numbers earlier replies gave):
//   open DEV | pd | mr PD LEN | cq DEPTH | srq PD DEPTH | xrc_srq XRCD PD CQ MR RECVS
//   qp TYPE PD|XRCD SEND_CQ RECV_CQ SRQ|-1 | xrcd PATH OFLAGS | open_qp XRCD QPN
//   rts QP LID QPN TIMEOUT RETRY | send QP MR SRQN TAG [LEN [LKEY_DELTA]] | recv QP MR COUNT
//   state QP init|err|reset | write QP MR RKEY_DELTA | events
//   poll CQ MAX MS | poll_tries CQ MAX TRIES | query_qp QP
//   destroy HANDLE | pid | exit
// "exit" answers, then exits without releasing anything (the exit path a crash-free program takes
// when it forgets its objects). End of input exits the same way.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "objects.h"

namespace {

using player::Values;

int dispatch(player::Objects& o, const std::string& cmd, std::istringstream& in, Values* out) {
  std::string s;
  long a = 0, b = 0, c = 0, d = 0, e = 0;
  if (cmd == "open") return in >> s ? o.open(s, out) : EINVAL;
  if (cmd == "pd") return o.alloc_pd(out);
  if (cmd == "mr") return in >> a >> b ? o.reg_mr(a, b, out) : EINVAL;
  if (cmd == "cq") return in >> a ? o.create_cq(a, out) : EINVAL;
  if (cmd == "srq") return in >> a >> b ? o.create_srq(a, b, out) : EINVAL;
  if (cmd == "xrc_srq")
    return in >> a >> b >> c >> d >> e ? o.create_xrc_srq(a, b, c, d, e, out) : EINVAL;
  if (cmd == "qp") return in >> s >> a >> b >> c >> d ? o.create_qp(s, a, b, c, d, out) : EINVAL;
  if (cmd == "xrcd") return in >> s >> a ? o.open_xrcd(s, a, out) : EINVAL;
  if (cmd == "open_qp") return in >> a >> b ? o.open_qp(a, b, out) : EINVAL;
  if (cmd == "rts") return in >> a >> b >> c >> d >> e ? o.to_rts(a, b, c, d, e) : EINVAL;
  if (cmd == "send") {
    long len = 16, lkey_delta = 0;  // optional: LEN [LKEY_DELTA]
    if (!(in >> a >> b >> c >> d)) return EINVAL;
    if (in >> len) in >> lkey_delta;
    return o.post_send(a, b, c, d, len, lkey_delta);
  }
  if (cmd == "state") return in >> a >> s ? o.modify_state(a, s) : EINVAL;
  if (cmd == "write") return in >> a >> b >> c ? o.post_write(a, b, c) : EINVAL;
  if (cmd == "events") return o.async_events(out);
  if (cmd == "query_qp") return in >> a ? o.query_qp(a, out) : EINVAL;
  if (cmd == "recv") return in >> a >> b >> c ? o.post_recv(a, b, c) : EINVAL;
  if (cmd == "poll") return in >> a >> b >> c ? o.poll(a, b, c, out) : EINVAL;
  if (cmd == "poll_tries") return in >> a >> b >> c ? o.poll_tries(a, b, c, out) : EINVAL;
  if (cmd == "destroy") return in >> a ? o.destroy(a) : EINVAL;
  if (cmd == "pid") {
    out->push_back({"pid", getpid()});
    return 0;
  }
  return ENOSYS;
}

}  // namespace

int main() {
  player::Objects objects;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "exit") {
      std::printf("ok\n");
      std::fflush(stdout);
      return 0;
    }
    Values out;
    int rc = dispatch(objects, cmd, in, &out);
    if (rc) {
      std::printf("err %d %s\n", rc, cmd.c_str());
    } else {
      std::printf("ok");
      for (const auto& [k, v] : out) std::printf(" %s=%ld", k.c_str(), v);
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  return 0;
}
