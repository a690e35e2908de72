// SPDX-License-Identifier: BSD-2-Clause
#include "xrc_players.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "emu/census.h"
#include "verbs_fixture.h"

namespace vt {
namespace {

constexpr const char* kPlayerRole = "xrc-player";
constexpr const char* kCensusRole = "xrc-census";

bool write_frame(int fd, const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  return write_all(fd, &n, sizeof n) && write_all(fd, s.data(), n);
}

bool read_frame(int fd, std::string* s) {
  uint32_t n = 0;
  if (!read_all(fd, &n, sizeof n) || n > (1u << 24)) return false;
  s->assign(n, '\0');
  return read_all(fd, s->data(), n);
}

// ---- the player process ----

struct PlayerState {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* send_cq = nullptr;  // the INI QP's
  ibv_cq* recv_cq = nullptr;  // the XRC SRQ's
  int fd = -1;
  ibv_xrcd* xrcd = nullptr;
  ibv_qp* tgt = nullptr;  // a TGT QP handle: created or opened
  ibv_srq* srq = nullptr;
  ibv_qp* ini = nullptr;
  alignas(4096) uint8_t buf[4096];
  ibv_mr* mr = nullptr;
  uint16_t lid = 0;
};

std::string err_reply(int e, const char* what) {
  return "err " + std::to_string(e ? e : EIO) + " " + what;
}

std::string ok_reply(std::initializer_list<long> v = {}) {
  std::string s = "ok";
  for (long x : v) s += " " + std::to_string(x);
  return s;
}

std::string player_step(PlayerState& p, const std::string& line) {
  std::istringstream in(line);
  std::string cmd;
  in >> cmd;
  errno = 0;
  if (cmd == "setenv") {
    std::string k, v;
    in >> k >> v;
    setenv(k.c_str(), v.c_str(), 1);
    return ok_reply();
  }
  if (cmd == "ping") return ok_reply({getpid()});
  if (cmd ==
      "async_event") {  // MS: the next async event within MS, acked: "ok type qpn" or "ok -1"
    long ms = 0;
    in >> ms;
    ibv_async_event ev;
    if (!get_async_event(p.ctx, &ev, std::chrono::milliseconds(ms))) return ok_reply({-1});
    long type = ev.event_type;
    long qpn = (type == IBV_EVENT_QP_FATAL || type == IBV_EVENT_QP_REQ_ERR ||
                type == IBV_EVENT_QP_ACCESS_ERR || type == IBV_EVENT_COMM_EST)
                   ? static_cast<long>(ev.element.qp->qp_num)
                   : -1;
    ibv_async_event copy = ev;
    ibv_ack_async_event(&copy);
    return ok_reply({type, qpn});
  }
  if (cmd == "open_xrcd") {
    std::string path;
    int oflags = 0;
    in >> path >> oflags;
    if (p.xrcd) return err_reply(EEXIST, "player already has a domain open");
    if (p.fd < 0) p.fd = open(path.c_str(), O_RDONLY);
    if (p.fd < 0) return err_reply(errno, "open file");
    p.xrcd = open_xrcd(p.ctx, p.fd, oflags);
    return p.xrcd ? ok_reply() : err_reply(errno, "ibv_open_xrcd");
  }
  if (cmd == "close_xrcd") {
    if (!p.xrcd) return err_reply(ENOENT, "no domain");
    int rc = ibv_close_xrcd(p.xrcd);
    if (rc) return err_reply(rc, "ibv_close_xrcd");
    p.xrcd = nullptr;
    return ok_reply();
  }
  if (cmd == "create_srq") {
    int n = 16;
    in >> n;
    if (!p.xrcd) return err_reply(ENOENT, "no domain");
    if (!p.recv_cq) p.recv_cq = ibv_create_cq(p.ctx, 64, nullptr, nullptr, 0);
    if (!p.recv_cq) return err_reply(errno, "ibv_create_cq");
    p.srq = create_xrc_srq(p.ctx, p.pd, p.xrcd, p.recv_cq, 32);
    if (!p.srq) return err_reply(errno, "ibv_create_srq_ex");
    for (int i = 0; i < n; ++i) {
      ibv_sge sg{reinterpret_cast<uint64_t>(p.buf) + 64u * (i % 64), 64, p.mr->lkey};
      ibv_recv_wr wr{};
      wr.wr_id = static_cast<uint64_t>(i);
      wr.sg_list = &sg;
      wr.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      if (int rc = ibv_post_srq_recv(p.srq, &wr, &bad)) return err_reply(rc, "ibv_post_srq_recv");
    }
    uint32_t srqn = 0;
    if (int rc = ibv_get_srq_num(p.srq, &srqn)) return err_reply(rc, "ibv_get_srq_num");
    return ok_reply({static_cast<long>(srqn)});
  }
  if (cmd == "destroy_srq") {
    if (!p.srq) return err_reply(ENOENT, "no srq");
    int rc = ibv_destroy_srq(p.srq);
    if (rc) return err_reply(rc, "ibv_destroy_srq");
    p.srq = nullptr;
    return ok_reply();
  }
  if (cmd == "create_tgt") {
    if (!p.xrcd) return err_reply(ENOENT, "no domain");
    if (p.tgt) return err_reply(EEXIST, "player already holds a TGT handle");
    p.tgt = create_xrc_tgt(p.ctx, p.xrcd);
    return p.tgt ? ok_reply({static_cast<long>(p.tgt->qp_num)}) : err_reply(errno, "create TGT QP");
  }
  if (cmd == "open_qp") {
    long qpn = 0;
    in >> qpn;
    if (!p.xrcd) return err_reply(ENOENT, "no domain");
    if (p.tgt) return err_reply(EEXIST, "player already holds a TGT handle");
    ibv_qp_open_attr a{};
    a.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    a.qp_num = static_cast<uint32_t>(qpn);
    a.xrcd = p.xrcd;
    a.qp_type = IBV_QPT_XRC_RECV;
    p.tgt = ibv_open_qp(p.ctx, &a);
    return p.tgt ? ok_reply({static_cast<long>(p.tgt->qp_num)}) : err_reply(errno, "ibv_open_qp");
  }
  if (cmd == "destroy_tgt") {
    if (!p.tgt) return err_reply(ENOENT, "no TGT handle");
    int rc = ibv_destroy_qp(p.tgt);
    if (rc) return err_reply(rc, "ibv_destroy_qp");
    p.tgt = nullptr;
    return ok_reply();
  }
  if (cmd == "connect_tgt") {  // LID INI_QPN: the TGT QP's path is the sender's INI QP
    long lid = 0, ini = 0;
    in >> lid >> ini;
    if (!p.tgt) return err_reply(ENOENT, "no TGT handle");
    int rc = connect_qp(p.tgt, static_cast<uint16_t>(lid), static_cast<uint32_t>(ini), 0, 0);
    return rc ? err_reply(rc, "connect TGT QP") : ok_reply();
  }
  if (cmd == "create_ini") {
    if (p.ini) return err_reply(EEXIST, "player already has an INI QP");
    if (!p.send_cq) p.send_cq = ibv_create_cq(p.ctx, 64, nullptr, nullptr, 0);
    if (!p.send_cq) return err_reply(errno, "ibv_create_cq");
    p.ini = create_xrc_ini(p.ctx, p.pd, p.send_cq, 16);
    if (!p.ini) return err_reply(errno, "create INI QP");
    return ok_reply({static_cast<long>(p.ini->qp_num), p.lid});
  }
  if (cmd == "connect_ini") {  // LID TGT_QPN: short timeout and one retry, so a lost TGT shows fast
    long lid = 0, tgt = 0;
    in >> lid >> tgt;
    if (!p.ini) return err_reply(ENOENT, "no INI QP");
    ConnParams cp;
    cp.timeout = 1;
    cp.retry_cnt = 1;
    cp.rnr_retry = 1;
    int rc = connect_qp(p.ini, static_cast<uint16_t>(lid), static_cast<uint32_t>(tgt), 0, 0, cp);
    return rc ? err_reply(rc, "connect INI QP") : ok_reply();
  }
  if (cmd == "send") {  // SRQN TAG: one SEND with immediate TAG; replies the completion's status
    long srqn = 0, tag = 0;
    in >> srqn >> tag;
    if (!p.ini) return err_reply(ENOENT, "no INI QP");
    ibv_sge sg{reinterpret_cast<uint64_t>(p.buf), 16, p.mr->lkey};
    ibv_send_wr wr = send_wr(static_cast<uint64_t>(tag), IBV_WR_SEND_WITH_IMM, &sg, 1);
    wr.imm_data = htonl(static_cast<uint32_t>(tag));
    wr.qp_type.xrc.remote_srqn = static_cast<uint32_t>(srqn);
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(p.ini, &wr, &bad)) return err_reply(rc, "ibv_post_send");
    std::vector<ibv_wc> wc = poll_n(p.send_cq, 1, std::chrono::seconds(5));
    if (wc.empty()) return err_reply(ETIMEDOUT, "no send completion");
    return ok_reply({static_cast<long>(wc[0].status)});
  }
  if (cmd ==
      "poll") {  // N MS: up to N completions of the SRQ's CQ within MS; "ok n status tag ..."
    long n = 1, ms = 2000;
    in >> n >> ms;
    if (!p.recv_cq) return err_reply(ENOENT, "no SRQ CQ");
    std::vector<ibv_wc> wc =
        poll_n(p.recv_cq, static_cast<size_t>(n), std::chrono::milliseconds(ms));
    std::string s = "ok " + std::to_string(wc.size());
    for (const ibv_wc& w : wc)
      s += " " + std::to_string(w.status) + " " +
           std::to_string((w.wc_flags & IBV_WC_WITH_IMM) ? ntohl(w.imm_data) : 0u);
    return s;
  }
  return err_reply(EINVAL, "unknown command");
}

[[noreturn]] void run_player() {
  PlayerState& p = *new PlayerState();
  p.ctx = peer_open_emu0();
  if (p.ctx) p.pd = ibv_alloc_pd(p.ctx);
  if (p.pd) p.mr = ibv_reg_mr(p.pd, p.buf, sizeof p.buf, IBV_ACCESS_LOCAL_WRITE);
  ibv_port_attr pa{};
  bool up = p.mr && ibv_query_port(p.ctx, 1, &pa) == 0;
  p.lid = pa.lid;
  if (!write_frame(kPeerOut, up ? ok_reply({getpid()}) : err_reply(errno, "emu0/pd/mr/port")))
    _exit(3);
  if (!up) _exit(2);
  std::string line;
  while (read_frame(kPeerIn, &line)) {
    if (line == "exit") {
      write_frame(kPeerOut, ok_reply());
      std::exit(0);  // a normal exit, nothing released by hand: what a file close releases goes
    }
    if (!write_frame(kPeerOut, player_step(p, line))) _exit(3);
  }
  _exit(0);  // the parent went away
}

// ---- the census process ----

[[noreturn]] void run_census() {
  emu::Segment* seg = emu::Segment::get();  // attaching sweeps the dead first
  if (!seg) {
    write_frame(kPeerOut, "err");
    _exit(2);
  }
  emu::Census c = emu::take_census(seg);
  std::string s;
  char b[256];
  for (const emu::CensusTgtQp& t : c.tgt_qps) {
    std::snprintf(b, sizeof b, "T %u %u %u %d %d %d %d %s", t.qpn, t.xrcd, t.handles,
                  t.dies_with_xrcd, t.orphaned, t.creator_alive, t.creator_pid, t.state.c_str());
    s += b;
    for (const emu::CensusHandle& x : t.holders)
      s += " " + std::to_string(x.pid) + (x.alive ? "+" : "-");
    s += "\n";
  }
  for (const emu::CensusXrcd& d : c.xrcds) {
    std::snprintf(b, sizeof b, "X %u %llu %u %u %s", d.index,
                  static_cast<unsigned long long>(d.inode), d.opens, d.objects, d.policy.c_str());
    s += b;
    for (const emu::CensusHandle& x : d.openers)
      s += " " + std::to_string(x.pid) + (x.alive ? "+" : "-");
    s += "\n";
  }
  for (const emu::CensusObject& o : c.objects)
    s += "O " + o.kind + " " + (o.type.empty() ? "-" : o.type) + " " + std::to_string(o.owner_pid) +
         " " + (o.owner_alive ? "1" : "0") + "\n";
  s += "D " + std::to_string(c.dead_owned.size()) + "\n";
  s += "H " + std::to_string(c.leaked_heap_blocks) + "\n";
  s += "J " + emu::census_json(c);
  write_frame(kPeerOut, s);
  _exit(0);
}

const PeerRole kPlayer(kPlayerRole, run_player);
const PeerRole kCensus(kCensusRole, run_census);

void parse_pids(std::istringstream& in, std::vector<int>* pids, std::vector<bool>* alive) {
  std::string w;
  while (in >> w) {
    pids->push_back(std::atoi(w.c_str()));
    alive->push_back(!w.empty() && w.back() == '+');
  }
}

Reply parse_reply(const std::string& s) {
  Reply r;
  r.answered = true;
  r.text = s;
  std::istringstream in(s);
  std::string w;
  in >> w;
  if (w == "ok") {
    long v;
    while (in >> v) r.vals.push_back(v);
  } else {
    in >> r.err;
    if (!r.err) r.err = EIO;
  }
  return r;
}

}  // namespace

bool Player::start() {
  peer_ = std::make_unique<Peer>();
  if (!peer_->spawn(kPlayerRole)) return false;
  pid_ = peer_->pid();
  alive_ = true;
  Reply r = reply();
  return r.ok();
}

bool Player::send_only(const std::string& cmd) {
  uint32_t n = static_cast<uint32_t>(cmd.size());
  return alive_ && peer_->send(&n, sizeof n) && peer_->send(cmd.data(), n);
}

Reply Player::reply(std::chrono::milliseconds deadline) {
  auto until = std::chrono::steady_clock::now() + deadline;
  uint32_t n = 0;
  std::string s;
  if (!alive_ || !peer_->recv_by(&n, sizeof n, until) || n > (1u << 24)) return {};
  s.assign(n, '\0');
  if (n && !peer_->recv_by(s.data(), n, until)) return {};
  return parse_reply(s);
}

Reply Player::call(const std::string& cmd, std::chrono::milliseconds deadline) {
  if (!send_only(cmd)) return {};
  Reply r = reply(deadline);
  // EMU_XRC_HANG_GDB=1: the stacks of a player that did not answer (while it still hangs).
  if (!r.answered && alive_ && std::getenv("EMU_XRC_HANG_GDB")) {
    std::string g = "gdb -batch -p " + std::to_string(pid_) + " -ex 'thread apply all bt' 1>&2";
    if (std::system(g.c_str()) != 0) std::fprintf(stderr, "gdb failed\n");
  }
  return r;
}

void Player::kill_now() {
  if (!alive_) return;
  kill(pid_, SIGKILL);
  peer_->wait();
  alive_ = false;
}

bool Player::exit_normally() {
  if (!alive_) return false;
  Reply r = call("exit");
  int st = peer_->wait();
  alive_ = false;
  return r.ok() && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

const CensusView::Tgt* CensusView::tgt(uint32_t qpn) const {
  for (const Tgt& t : tgts)
    if (t.qpn == qpn) return &t;
  return nullptr;
}

const CensusView::Xrcd* CensusView::xrcd_of_inode(uint64_t inode) const {
  for (const Xrcd& d : xrcds)
    if (d.inode == inode) return &d;
  return nullptr;
}

size_t CensusView::count(const std::string& kind, const std::string& type) const {
  size_t n = 0;
  for (const Object& o : objects) n += o.kind == kind && (type.empty() || o.type == type);
  return n;
}

CensusView take_census_view() {
  CensusView v;
  Peer census;
  if (!census.spawn(kCensusRole)) return v;
  auto until = std::chrono::steady_clock::now() + kStepDeadline;
  uint32_t n = 0;
  std::string s;
  if (!census.recv_by(&n, sizeof n, until) || n > (1u << 24)) {
    if (std::getenv("EMU_XRC_HANG_GDB")) {
      std::string g =
          "gdb -batch -p " + std::to_string(census.pid()) + " -ex 'thread apply all bt' 1>&2";
      if (std::system(g.c_str()) != 0) std::fprintf(stderr, "gdb failed\n");
    }
    return v;
  }
  s.assign(n, '\0');
  if (n && !census.recv_by(s.data(), n, until)) return v;
  census.wait();
  std::istringstream lines(s);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.size() < 2) continue;
    std::istringstream in(line.substr(2));
    switch (line[0]) {
      case 'T': {
        CensusView::Tgt t;
        int dies, orph, calive;
        in >> t.qpn >> t.xrcd >> t.handles >> dies >> orph >> calive >> t.creator_pid >> t.state;
        t.dies_with_xrcd = dies;
        t.orphaned = orph;
        t.creator_alive = calive;
        parse_pids(in, &t.holders, &t.holder_alive);
        v.tgts.push_back(t);
        break;
      }
      case 'X': {
        CensusView::Xrcd d;
        in >> d.index >> d.inode >> d.opens >> d.objects >> d.policy;
        parse_pids(in, &d.openers, &d.opener_alive);
        v.xrcds.push_back(d);
        break;
      }
      case 'O': {
        CensusView::Object o;
        int alive;
        in >> o.kind >> o.type >> o.owner_pid >> alive;
        o.owner_alive = alive;
        v.objects.push_back(o);
        break;
      }
      case 'D':
        in >> v.dead_owned;
        break;
      case 'H':
        in >> v.leaked_heap_blocks;
        break;
      case 'J':
        v.json = line.substr(2);
        break;
    }
  }
  v.ok = s.rfind("err", 0) != 0;
  return v;
}

DomainFile::DomainFile() {
  const char* dir = std::getenv("TMPDIR");
  std::string t = std::string(dir && *dir ? dir : "/tmp") + "/rdmaemu-xrcd-XXXXXX";
  int fd = mkstemp(t.data());
  if (fd < 0) return;
  struct stat st;
  if (fstat(fd, &st) == 0) inode = st.st_ino;
  close(fd);
  path = t;
}

DomainFile::~DomainFile() {
  if (!path.empty()) unlink(path.c_str());
}

}  // namespace vt
