// SPDX-License-Identifier: BSD-2-Clause
// emu-scale: one round of the scale benchmark (bench/scale.sh runs the rounds and the ratios).
// Verbs only, so that it measures whatever tables the device has. Run under emu-run:
//
//   emu-run emu-scale PROCS LIVE[,LIVE...] PAIRS ATTACHES
//
// The driver never attaches itself. It forks PROCS-1 helpers, each an attached process holding a
// context, PD, CQ, MR and an RC QP connected to itself that has carried one message (so its engine
// slot is taken, as in a process that has run traffic), then a measurer that, for each kind (pd,
// cq, mr, qp) and each LIVE count ("max": the device's limit less what the helpers hold), makes
// LIVE objects of the kind and times PAIRS create+destroy pairs of one more; then ATTACHES fresh
// processes one after another, each timing its attach (the first ibv_get_device_list +
// ibv_open_device) and its exit (from the exit call to the driver's waitpid: the detach), while
// PROCS processes are attached (one more helper is started for this phase).
// Output, one line per figure, medians of the pairs:
//   create_destroy KIND LIVE NS        attach - - NS        detach - - NS
#include <infiniband/verbs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "emu/cli.h"

namespace {

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

uint64_t median(std::vector<uint64_t> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "emu-scale: %s failed (errno %d)\n", what, errno);
  _exit(2);
}

ibv_context* open_emu0() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = nullptr;
  for (int i = 0; list && i < n && !ctx; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), "emu0") == 0) ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  if (!ctx) die("open emu0");
  return ctx;
}

ibv_qp* make_qp(ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr a = {};
  a.send_cq = a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = a.cap.max_recv_wr = 1;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  return ibv_create_qp(pd, &a);
}

// An RC QP connected to itself, one message sent and received: the helper's engine slot is taken.
void loop_one_message(ibv_context* ctx, ibv_pd* pd, ibv_cq* cq, ibv_qp* qp, ibv_mr* mr) {
  ibv_port_attr pa;
  if (ibv_query_port(ctx, 1, &pa)) die("query_port");
  ibv_qp_attr at = {};
  at.qp_state = IBV_QPS_INIT;
  at.port_num = 1;
  if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("init");
  at = {};
  at.qp_state = IBV_QPS_RTR;
  at.path_mtu = IBV_MTU_1024;
  at.dest_qp_num = qp->qp_num;
  at.ah_attr.dlid = pa.lid;
  at.ah_attr.port_num = 1;
  at.max_dest_rd_atomic = 1;
  at.min_rnr_timer = 1;
  if (ibv_modify_qp(qp, &at,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("rtr");
  at = {};
  at.qp_state = IBV_QPS_RTS;
  at.timeout = 14;
  at.retry_cnt = at.rnr_retry = 7;
  at.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &at,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    die("rts");
  char* buf = static_cast<char*>(mr->addr);
  ibv_sge rs = {reinterpret_cast<uint64_t>(buf + 64), 64, mr->lkey};
  ibv_recv_wr rw = {};
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  ibv_sge ss = {reinterpret_cast<uint64_t>(buf), 64, mr->lkey};
  ibv_send_wr sw = {};
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.opcode = IBV_WR_SEND;
  sw.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* sbad = nullptr;
  if (ibv_post_recv(qp, &rw, &rbad) || ibv_post_send(qp, &sw, &sbad)) die("post");
  ibv_wc wc[2];
  for (int got = 0; got < 2;) {
    int r = ibv_poll_cq(cq, 2 - got, wc + got);
    if (r < 0) die("poll_cq");
    if (r == 0) sched_yield();
    got += r;
  }
  (void)pd;
}

// A helper: attached, holding its objects, until the driver closes `quit`.
[[noreturn]] void run_helper(int ready, int quit) {
  ibv_context* ctx = open_emu0();
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = pd ? ibv_create_cq(ctx, 4, nullptr, nullptr, 0) : nullptr;
  static char buf[4096];
  ibv_mr* mr = cq ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : nullptr;
  ibv_qp* qp = mr ? make_qp(pd, cq) : nullptr;
  if (!qp) die("helper objects");
  loop_one_message(ctx, pd, cq, qp, mr);
  char b = 1;
  if (write(ready, &b, 1) != 1) die("ready");
  while (read(quit, &b, 1) > 0) {
  }
  std::exit(0);
}

// The objects of one kind that stay live while the pairs are timed.
struct Kind {
  const char* name;
  int max;  // the device's limit
};

struct Base {
  ibv_context* ctx;
  ibv_pd* pd;
  ibv_cq* cq;
  char* buf;
};

void* make(const char* kind, const Base& b) {
  if (!std::strcmp(kind, "pd")) return ibv_alloc_pd(b.ctx);
  if (!std::strcmp(kind, "cq")) return ibv_create_cq(b.ctx, 4, nullptr, nullptr, 0);
  if (!std::strcmp(kind, "mr")) return ibv_reg_mr(b.pd, b.buf, 4096, IBV_ACCESS_LOCAL_WRITE);
  return make_qp(b.pd, b.cq);
}

void destroy(const char* kind, void* o) {
  int rc;
  if (!std::strcmp(kind, "pd"))
    rc = ibv_dealloc_pd(static_cast<ibv_pd*>(o));
  else if (!std::strcmp(kind, "cq"))
    rc = ibv_destroy_cq(static_cast<ibv_cq*>(o));
  else if (!std::strcmp(kind, "mr"))
    rc = ibv_dereg_mr(static_cast<ibv_mr*>(o));
  else
    rc = ibv_destroy_qp(static_cast<ibv_qp*>(o));
  if (rc) die("destroy");
}

[[noreturn]] void run_measurer(const std::vector<std::string>& lives, int pairs, int procs) {
  ibv_context* ctx = open_emu0();
  ibv_device_attr da;
  if (ibv_query_device(ctx, &da)) die("query_device");
  static char buf[4096];
  Base b = {ctx, ibv_alloc_pd(ctx), ibv_create_cq(ctx, 4, nullptr, nullptr, 0), buf};
  if (!b.pd || !b.cq) die("base objects");
  // Room for the helpers' objects, ours above, and the one being timed.
  int held = procs + 4;
  const Kind kinds[] = {{"pd", da.max_pd}, {"cq", da.max_cq}, {"mr", da.max_mr}, {"qp", da.max_qp}};
  for (const Kind& k : kinds) {
    for (const std::string& l : lives) {
      int live = std::min(l == "max" ? k.max : std::atoi(l.c_str()), k.max - held);
      std::vector<void*> kept;
      for (int i = 0; i < live; ++i) {
        void* o = make(k.name, b);
        if (!o) die(k.name);
        kept.push_back(o);
      }
      std::vector<uint64_t> ns;
      for (int i = 0; i < pairs; ++i) {
        uint64_t t0 = now_ns();
        void* o = make(k.name, b);
        if (!o) die(k.name);
        destroy(k.name, o);
        ns.push_back(now_ns() - t0);
      }
      std::printf("create_destroy %s %s %llu\n", k.name, l.c_str(),
                  static_cast<unsigned long long>(median(ns)));
      std::fflush(stdout);
      while (!kept.empty()) {
        destroy(k.name, kept.back());
        kept.pop_back();
      }
    }
  }
  std::exit(0);
}

// One fresh process's attach and detach, in ns.
void time_attach(uint64_t* attach, uint64_t* detach) {
  int fds[2];
  if (pipe(fds)) die("pipe");
  pid_t pid = fork();
  if (pid == 0) {
    uint64_t t0 = now_ns();
    ibv_context* ctx = open_emu0();
    uint64_t t[2] = {now_ns() - t0, 0};
    ibv_close_device(ctx);
    t[1] = now_ns();
    if (write(fds[1], t, sizeof t) != sizeof t) _exit(2);
    std::exit(0);  // the exit handler detaches
  }
  uint64_t t[2] = {0, 0};
  if (read(fds[0], t, sizeof t) != sizeof t) die("attacher");
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("attacher exit");
  *attach = t[0];
  *detach = now_ns() - t[1];
  close(fds[0]);
  close(fds[1]);
}

}  // namespace

// Each of LIVE's comma-separated counts: a whole number or "max".
const CLI::Validator kLiveCounts(
    [](const std::string& text) -> std::string {
      size_t start = 0;
      do {
        const size_t comma = text.find(',', start);
        const std::string one = text.substr(start, comma - start);
        if (one != "max" && !emu::cli::at_least(0)(one).empty())
          return one + " is not a count or max";
        start = comma == std::string::npos ? comma : comma + 1;
      } while (start != std::string::npos);
      return "";
    },
    "LIVE[,LIVE...]");

int main(int argc, char** argv) {
  int procs = 0, pairs = 0, attaches = 0;
  std::string live_list;
  CLI::App app(
      "the scale benchmark's one round: the time to make and destroy objects with "
      "LIVE of each kind alive among PROCS processes, and to attach and detach",
      "emu-scale");
  app.add_option("PROCS", procs, "processes attached to the fabric")
      ->required()
      ->check(emu::cli::at_least(1));
  app.add_option("LIVE", live_list, "objects of each kind alive while timing (or max)")
      ->required()
      ->check(kLiveCounts);
  app.add_option("PAIRS", pairs, "creations and destructions timed")
      ->required()
      ->check(emu::cli::at_least(1));
  app.add_option("ATTACHES", attaches, "attaches and detaches timed")
      ->required()
      ->check(emu::cli::at_least(1));
  app.footer("Run it under emu-run (bench/scale.sh does).");
  const int status = emu::cli::parse(app, argc, argv);
  if (status >= 0) return status;
  std::vector<std::string> lives;
  for (size_t start = 0; start != std::string::npos;) {
    const size_t comma = live_list.find(',', start);
    lives.push_back(live_list.substr(start, comma - start));
    start = comma == std::string::npos ? comma : comma + 1;
  }
  int ready[2], quit[2];
  if (pipe(ready) || pipe(quit)) die("pipe");
  std::vector<pid_t> helpers;
  for (int i = 0; i + 1 < procs; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      close(quit[1]);
      run_helper(ready[1], quit[0]);
    }
    helpers.push_back(pid);
  }
  for (size_t i = 0; i < helpers.size(); ++i) {
    char b;
    if (read(ready[0], &b, 1) != 1) die("helper start");
  }
  std::fflush(stdout);
  pid_t m = fork();
  if (m == 0) run_measurer(lives, pairs, procs);
  int st = 0;
  waitpid(m, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("measurer");
  // One more helper: an attacher joins a fabric of PROCS processes (with none, it would make one).
  pid_t extra = fork();
  if (extra == 0) {
    close(quit[1]);
    run_helper(ready[1], quit[0]);
  }
  helpers.push_back(extra);
  char b;
  if (read(ready[0], &b, 1) != 1) die("helper start");
  std::vector<uint64_t> at, de;
  for (int i = 0; i < attaches; ++i) {
    uint64_t a, d;
    time_attach(&a, &d);
    at.push_back(a);
    de.push_back(d);
  }
  std::printf("attach - - %llu\ndetach - - %llu\n", static_cast<unsigned long long>(median(at)),
              static_cast<unsigned long long>(median(de)));
  close(quit[0]);
  close(quit[1]);
  for (pid_t h : helpers) waitpid(h, &st, 0);
  return 0;
}
