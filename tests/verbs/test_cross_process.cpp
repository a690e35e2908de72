// SPDX-License-Identifier: BSD-2-Clause
// Tests with a second process (peer.h: the test binary re-executes itself as the peer).
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "fork_check.h"
#include "peer.h"
#include "verbs_fixture.h"

namespace vt {
namespace {

constexpr size_t kPeerBuf = 4096;
constexpr uint64_t kPeerIova = 0x7e5000000000;  // an I/O address unlike the buffer's own

struct PeerInfo {
  uint32_t ok;  // 0: the peer failed to set up (err says why)
  uint16_t lid;
  uint32_t qpn;
  uint32_t psn;
  uint32_t rkey;
  uint64_t addr;
  char err[96];
};

struct ParentInfo {
  uint16_t lid;
  uint32_t qpn;
  uint32_t psn;
};

// The peer's verdict on its buffer after the parent's one-sided operations.
struct PeerReport {
  uint32_t write_ok;
  uint32_t faa_value_ok;
  uint64_t faa_value;
};

// Buffer layout the parent and the peer agree on.
constexpr size_t kWriteOff = 0, kWriteLen = 256;   // the parent writes pattern_byte(i) here
constexpr size_t kReadOff = 1024, kReadLen = 256;  // the peer fills pattern_byte(i + 100) here
constexpr size_t kFaaOff = 2048;                   // u64: 100, the parent adds 23
constexpr uint64_t kFaaInit = 100, kFaaAdd = 23;
uint8_t pattern_byte(size_t i) { return static_cast<uint8_t>(i * 13 + 1); }

// SENDs to a receiving peer: a small one (it travels in the CQE and the receiver's poll scatters
// it), a large one (copied straight into the receive buffer), one of the largest size a CQE carries
// (32 B) with immediate data, and a small one scattered over a receive of two SGEs.
constexpr int kRecvCount = 4;
constexpr size_t kRecvOff[kRecvCount] = {0, 1024, 3072, 3584};
constexpr uint32_t kRecvLen[kRecvCount] = {1024, 2048, 512, 10};
constexpr uint32_t kSendLen[kRecvCount] = {8, 1500, 32, 30};
constexpr size_t kSecondSgeOff = 3600;  // receive 3's second SGE (400 bytes)
constexpr uint32_t kSecondSgeLen = 400;
// Where byte b of message i lands in the receiver's buffer.
size_t recv_pos(int i, uint32_t b) {
  if (i == 3 && b >= kRecvLen[3]) return kSecondSgeOff + b - kRecvLen[3];
  return kRecvOff[i] + b;
}
constexpr uint32_t kImm = 0x12345678;

struct RecvReport {
  uint32_t ok;
  char err[96];
};

// ---- the peer process ----

// Sets up a QP and a buffer, connects, reports "ready" and then blocks in read() without any
// verbs call while the parent works on its memory. role "target" then checks the buffer; role
// "victim" is killed by the parent while blocked.
// Role "attach": only attach to the fabric (open emu0), report and exit.
[[noreturn]] void run_attach_peer() {
  uint8_t ok = peer_open_emu0() != nullptr;
  write_all(kPeerOut, &ok, 1);
  _exit(ok ? 0 : 2);
}

// The peer's buffer, by EMU_TEST_PEER_BACKING: private (unset), "shm" (the second page of a POSIX
// shm object, linked until the buffer is registered) or "memfd" (a memfd the peer keeps open).
// Shared ones are what the device reaches through a mapping instead of process_vm_* (the census
// shows their MR as SHARED).
const char* peer_backing() {
  const char* b = std::getenv("EMU_TEST_PEER_BACKING");
  return b ? b : "";
}

uint8_t* peer_buffer(PeerInfo& me, std::string* shm_name) {
  alignas(4096) static uint8_t priv[kPeerBuf];
  std::string backing = peer_backing();
  if (backing.empty()) return priv;
  int fd = -1;
  off_t off = 0;
  if (backing == "shm") {
    *shm_name = "/rdmaemu-test-peer-" + std::to_string(getpid());
    fd = shm_open(shm_name->c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    off = kPeerBuf;
  } else if (backing == "memfd") {
    fd = memfd_create("rdmaemu-test-peer", MFD_CLOEXEC);
  } else if (backing == "anon" || backing == "sysv") {  // no descriptor to find: map_files only
    void* p = MAP_FAILED;
    if (backing == "anon") {
      p = mmap(nullptr, kPeerBuf, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    } else if (int id = shmget(IPC_PRIVATE, kPeerBuf, IPC_CREAT | 0600); id >= 0) {
      p = shmat(id, nullptr, 0);
      shmctl(id, IPC_RMID, nullptr);  // gone with the last detach: nothing left behind
    }
    if (p == MAP_FAILED) peer_fail(me, "backing");
    return static_cast<uint8_t*>(p);
  }
  if (fd < 0 || ftruncate(fd, off + static_cast<off_t>(kPeerBuf)) != 0) peer_fail(me, "backing");
  void* p = mmap(nullptr, kPeerBuf, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
  if (p == MAP_FAILED) peer_fail(me, "mmap");
  return static_cast<uint8_t*>(p);
}

// EMU_TEST_PEER_FORK=1: the peer forks once its buffer is registered (the child exits at once);
// the parent's registration must serve as before.
void maybe_fork(PeerInfo& me) {
  const char* f = std::getenv("EMU_TEST_PEER_FORK");
  if (!f || std::strcmp(f, "1") != 0) return;
  if (fork_and_check([] { return 0; }) != 0) peer_fail(me, "fork");
}

[[noreturn]] void run_peer(std::string role) {
  if (role == "attach") run_attach_peer();
  PeerInfo me{};
  PeerDevice d = peer_open_device(me, 16);
  ibv_qp* qp = create_rc_qp(d.pd, d.cq, d.cq);
  if (!qp) peer_fail(me, "pd/cq/qp");
  std::string shm_name;
  uint8_t* buf = peer_buffer(me, &shm_name);
  for (size_t i = 0; i < kReadLen; ++i) buf[kReadOff + i] = pattern_byte(i + 100);
  uint64_t init = kFaaInit;
  std::memcpy(buf + kFaaOff, &init, 8);
  // Role "receiver-iova": the buffer is registered at an I/O address of its own, and receives name
  // it by that address (the device translates; a payload carried in the CQE must not be scattered
  // to the I/O address as if it were virtual).
  bool iova = role == "receiver-iova";
  if (iova) role = "receiver";
  uint64_t base = iova ? kPeerIova : reinterpret_cast<uint64_t>(buf);
  ibv_mr* mr = iova ? ibv_reg_mr_iova(d.pd, buf, kPeerBuf, kPeerIova, kAllAccess)
                    : ibv_reg_mr(d.pd, buf, kPeerBuf, kAllAccess);
  if (!shm_name.empty()) shm_unlink(shm_name.c_str());
  if (!mr) peer_fail(me, "reg_mr");
  maybe_fork(me);

  me = {1, d.lid, qp->qp_num, 0x4242, mr->rkey, reinterpret_cast<uint64_t>(buf), {}};
  peer_tell(me);
  auto other = peer_hear<ParentInfo>();
  uint8_t ready = connect_qp(qp, other.lid, other.qpn, me.psn, other.psn) == 0 ? 1 : 0;
  if (role == "receiver") {
    // Receives for the parent's SENDs, posted once connected, before the connection is
    // reported ready (a QP in RESET takes none).
    for (int i = 0; i < kRecvCount; ++i) {
      ibv_sge sg[2] = {{base + kRecvOff[i], kRecvLen[i], mr->lkey},
                       {base + kSecondSgeOff, kSecondSgeLen, mr->lkey}};
      if (post_recv(qp, 100 + i, sg, i == 3 ? 2 : 1)) peer_fail(me, "post_recv");
    }
  }
  peer_tell(ready);

  if (role == "receiver") {
    // Poll for the parent's SENDs and check what landed where.
    RecvReport rep{1, {}};
    auto wcs = poll_n(d.cq, kRecvCount);
    if (wcs.size() != static_cast<size_t>(kRecvCount)) {
      peer_report_failure(rep, "%zu of %d receives completed", wcs.size(), kRecvCount);
    }
    for (size_t k = 0; rep.ok && k < wcs.size(); ++k) {
      const ibv_wc& wc = wcs[k];
      int i = static_cast<int>(wc.wr_id) - 100;
      bool imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
      if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || i != static_cast<int>(k) ||
          wc.byte_len != kSendLen[i] || imm != (i == 2) || (imm && ntohl(wc.imm_data) != kImm)) {
        peer_report_failure(rep, "wc %zu: status %d opcode %d wr_id %llu len %u flags %u", k,
                            wc.status, wc.opcode, (unsigned long long)wc.wr_id, wc.byte_len,
                            wc.wc_flags);
        break;
      }
      for (uint32_t b = 0; b < kSendLen[i]; ++b)
        if (buf[recv_pos(i, b)] != pattern_byte(b + 7 * i)) {
          peer_report_failure(rep, "message %d: byte %u differs", i, b);
          break;
        }
    }
    peer_finish(rep);
  }
  if (role == "dereg") {
    // While the parent keeps writing into buf: deregister, then nothing may change buf any more.
    peer_hear<uint8_t>();  // go
    RecvReport rep{1, {}};
    if (ibv_dereg_mr(mr)) {
      peer_report_failure(rep, "ibv_dereg_mr failed");
    }
    static uint8_t snapshot[kPeerBuf];
    std::memcpy(snapshot, buf, kPeerBuf);
    uint8_t done = 1;
    write_all(kPeerOut, &done, 1);
    peer_hear<uint8_t>();  // the parent saw its writes fail
    if (rep.ok && std::memcmp(snapshot, buf, kPeerBuf) != 0) {
      peer_report_failure(rep, "the buffer changed after ibv_dereg_mr returned");
    }
    peer_finish(rep);
  }
  uint8_t go;
  if (!read_all(kPeerIn, &go, 1)) _exit(role == "victim" ? 0 : 3);  // blocked here: no verbs call
  PeerReport rep{};
  rep.write_ok = 1;
  for (size_t i = 0; i < kWriteLen; ++i)
    if (buf[kWriteOff + i] != pattern_byte(i)) rep.write_ok = 0;
  std::memcpy(&rep.faa_value, buf + kFaaOff, 8);
  rep.faa_value_ok = rep.faa_value == kFaaInit + kFaaAdd;
  peer_tell(rep);
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(d.cq);
  ibv_dealloc_pd(d.pd);
  ibv_close_device(d.ctx);
  _exit(0);
}

__attribute__((constructor)) void maybe_run_peer() {
  static const char* const kRoles[] = {"attach",   "target",        "victim",
                                       "receiver", "receiver-iova", "dereg"};
  std::string role = peer_role();
  for (const char* r : kRoles)
    if (role == r) run_peer(role);
}

// ---- the parent side ----

class CrossProcess : public VerbsTest {
 protected:
  // Spawns the peer, exchanges connection data and connects qp (made with `params`).
  void connect_peer(const char* role, const ConnParams& params, const std::string& env = "") {
    ASSERT_NO_FATAL_FAILURE(peer.start(role, &pi, env));
    cq = make_cq();
    ASSERT_NE(cq, nullptr);
    qp = make_qp(cq, cq);
    ASSERT_NE(qp, nullptr);
    ParentInfo me{lid, qp->qp_num, 0x777};
    ASSERT_TRUE(peer.send(&me, sizeof me));
    ASSERT_EQ(connect_qp(qp, pi.lid, pi.qpn, me.psn, pi.psn, params), 0);
    ASSERT_NO_FATAL_FAILURE(peer.expect_ready());
    local = make_buf(4096, kAllAccess, 0);
  }
  // SENDs of every size class to a peer in role "receiver*", which checks what it received.
  void send_to_receiver(const char* role);
  // The tests below, with the peer's buffer backed as `env` says (peer_buffer).
  void one_sided(const std::string& env);
  void dereg_race(const std::string& env);
  void dead_peer(const std::string& env);
  // The peer's MRs the census shows reachable through a shared mapping.
  int shared_mrs_of_peer();
  Peer peer;
  PeerInfo pi{};
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  Buf local;
};

// One-sided operations complete while the peer sits in read(): the device, not the peer's CPU,
// serves them.
TEST_F(CrossProcess, OneSidedWhilePeerBlocked) { one_sided(""); }

// The same into a POSIX shm object and a memfd of the peer's, which the device maps (no system
// call per message); and after the peer forked.
TEST_F(CrossProcess, OneSidedIntoPeerShm) { one_sided("EMU_TEST_PEER_BACKING=shm"); }
TEST_F(CrossProcess, OneSidedIntoPeerMemfd) { one_sided("EMU_TEST_PEER_BACKING=memfd"); }
TEST_F(CrossProcess, OneSidedIntoPeerShmAfterFork) {
  one_sided("EMU_TEST_PEER_BACKING=shm EMU_TEST_PEER_FORK=1");
}
// Shared anonymous memory and SysV shm have no file to open but /proc/self/map_files, which takes
// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE: without them the MR keeps the system-call path.
TEST_F(CrossProcess, OneSidedIntoPeerSharedAnonymous) { one_sided("EMU_TEST_PEER_BACKING=anon"); }
TEST_F(CrossProcess, OneSidedIntoPeerSysvShm) { one_sided("EMU_TEST_PEER_BACKING=sysv"); }
// With the recognition turned off, the shm MR is not shared (and the data path still right).
TEST_F(CrossProcess, OneSidedIntoPeerShmNotShared) {
  one_sided("EMU_TEST_PEER_BACKING=shm EMU_SHARED_BACKING=0");
}

int CrossProcess::shared_mrs_of_peer() {
  std::string s = run_command(EMU_CTL " census --json");
  std::string owner = "\"owner_pid\":" + std::to_string(peer.pid()) + ",";
  const std::string mr = "{\"kind\":\"mr\"";
  int count = 0;
  for (size_t at = s.find(mr); at != std::string::npos; at = s.find(mr, at + 1)) {
    std::string obj = s.substr(at, s.find('}', at) - at);
    if (obj.find(owner) != std::string::npos &&
        obj.find("\"type\":\"SHARED\"") != std::string::npos)
      ++count;
  }
  return count;
}

// CAP_SYS_ADMIN (21) or CAP_CHECKPOINT_RESTORE (40) in this process's effective set.
bool may_open_map_files() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return false;
  char line[256];
  unsigned long long eff = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "CapEff: %llx", &eff) == 1) break;
  std::fclose(f);
  return (eff >> 21 & 1) || (eff >> 40 & 1);
}

void CrossProcess::one_sided(const std::string& env) {
  ASSERT_NO_FATAL_FAILURE(connect_peer("target", {}, env));
  // Shared: a shm or memfd buffer unless recognition is off; a private one only if re-backed.
  bool backed = env.find("BACKING=") != std::string::npos;
  const char* moving = std::getenv("EMU_SHARED_MR");  // default on
  bool shared = backed ? env.find("EMU_SHARED_BACKING=0") == std::string::npos
                       : !(moving && std::strcmp(moving, "0") == 0);
  bool fileless = env.find("=anon") != std::string::npos || env.find("=sysv") != std::string::npos;
  if (fileless && !may_open_map_files()) shared = false;
  EXPECT_EQ(shared_mrs_of_peer(), shared ? 1 : 0);
  for (size_t i = 0; i < kWriteLen; ++i) local.p[i] = pattern_byte(i);
  ibv_sge ws = local.sge(0, kWriteLen);
  ibv_send_wr w = rdma_wr(1, IBV_WR_RDMA_WRITE, &ws, 1, pi.addr + kWriteOff, pi.rkey);
  ASSERT_EQ(post_one(qp, &w), 0);
  ASSERT_TRUE(wait_wc(cq, IBV_WC_SUCCESS, 1));

  ibv_sge rs = local.sge(1024, kReadLen);
  ibv_send_wr r = rdma_wr(2, IBV_WR_RDMA_READ, &rs, 1, pi.addr + kReadOff, pi.rkey);
  ASSERT_EQ(post_one(qp, &r), 0);
  ASSERT_TRUE(wait_wc(cq, IBV_WC_SUCCESS, 2));
  for (size_t i = 0; i < kReadLen; ++i) ASSERT_EQ(local.p[1024 + i], pattern_byte(i + 100)) << i;

  ibv_sge as = local.sge(2048, 8);
  ibv_send_wr a =
      atomic_wr(3, IBV_WR_ATOMIC_FETCH_AND_ADD, &as, pi.addr + kFaaOff, pi.rkey, kFaaAdd, 0);
  ASSERT_EQ(post_one(qp, &a), 0);
  ASSERT_TRUE(wait_wc(cq, IBV_WC_SUCCESS, 3));
  uint64_t old;
  std::memcpy(&old, local.p + 2048, 8);
  EXPECT_EQ(old, kFaaInit);

  uint8_t go = 1;
  ASSERT_TRUE(peer.send(&go, 1));
  PeerReport rep{};
  ASSERT_TRUE(peer.recv(&rep, sizeof rep)) << "peer died before reporting";
  EXPECT_EQ(rep.write_ok, 1u) << "the RDMA WRITE did not land in the peer's buffer";
  EXPECT_EQ(rep.faa_value_ok, 1u) << "peer sees " << rep.faa_value;
  pid_t peer_pid = peer.pid();
  int st = peer.wait();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "peer status " << st;
  // Nothing of the peer is left, and the heap has no block that no object names.
  std::string census = run_command(EMU_CTL " census --json");
  EXPECT_EQ(census.find("\"owner_pid\":" + std::to_string(peer_pid) + ","), std::string::npos)
      << census;
  std::string heap = run_command(EMU_CTL " heap");
  EXPECT_EQ(heap.rfind("0 leaked heap blocks", 0), 0u) << heap;
}

// SENDs to another process: the bytes, lengths and immediate data the receiver's polls report.
TEST_F(CrossProcess, SendsSmallAndLargeToPeer) { send_to_receiver("receiver"); }

// The same into receive buffers named by an I/O address (ibv_reg_mr_iova).
TEST_F(CrossProcess, SendsToReceiveBuffersOfAnIova) { send_to_receiver("receiver-iova"); }

void CrossProcess::send_to_receiver(const char* role) {
  ASSERT_NO_FATAL_FAILURE(connect_peer(role, {}));
  for (int i = 0; i < kRecvCount; ++i) {
    for (uint32_t b = 0; b < kSendLen[i]; ++b) local.p[1024 * i + b] = pattern_byte(b + 7 * i);
    ibv_sge sg = local.sge(1024 * i, kSendLen[i]);
    ibv_send_wr w{};
    w.wr_id = 10 + i;
    w.sg_list = &sg;
    w.num_sge = 1;
    w.opcode = i == 2 ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    w.imm_data = htonl(kImm);
    w.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(post_one(qp, &w), 0);
    ASSERT_TRUE(wait_wc(cq, IBV_WC_SUCCESS, 10 + i));
  }
  RecvReport rep{};
  peer.finish(&rep, 2 * kDeadline);
}

// Writes race the target's ibv_dereg_mr: once it returns, no write lands any more (as on hardware)
// and the initiator's next write fails with REM_ACCESS_ERR.
TEST_F(CrossProcess, NoWriteLandsAfterDeregReturns) { dereg_race(""); }
TEST_F(CrossProcess, NoWriteLandsInPeerShmAfterDeregReturns) {
  dereg_race("EMU_TEST_PEER_BACKING=shm");
}

void CrossProcess::dereg_race(const std::string& env) {
  ASSERT_NO_FATAL_FAILURE(connect_peer("dereg", {}, env));
  bool told = false, peer_done = false;
  int failed_at = -1;
  for (int i = 0; i < 100000 && failed_at < 0; ++i) {
    uint32_t v = static_cast<uint32_t>(i);
    std::memcpy(local.p, &v, 4);
    ibv_sge sg = local.sge(0, 64);
    ibv_send_wr w = rdma_wr(i, IBV_WR_RDMA_WRITE, &sg, 1, pi.addr + (i % 32) * 64, pi.rkey);
    ASSERT_EQ(post_one(qp, &w), 0);
    auto wcs = poll_n(cq, 1);
    ASSERT_EQ(wcs.size(), 1u);
    if (wcs[0].status != IBV_WC_SUCCESS) {
      EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
      failed_at = i;
    }
    if (i == 50 && !told) {
      uint8_t go = 1;
      ASSERT_TRUE(peer.send(&go, 1));
      told = true;
    }
    if (told && !peer_done) {
      uint8_t b;
      peer_done = peer.recv_byte_by(&b, std::chrono::steady_clock::now());
    }
  }
  ASSERT_GE(failed_at, 50) << "writes kept succeeding after the MR was deregistered";
  if (!peer_done) {
    uint8_t b;
    ASSERT_TRUE(peer.recv(&b, 1));
  }
  uint8_t done = 1;
  ASSERT_TRUE(peer.send(&done, 1));
  RecvReport rep{};
  peer.finish(&rep, 2 * kDeadline);
}

// A responder whose process died answers nothing: the write exhausts its transport retries.
TEST_F(CrossProcess, DeadPeerRetryExceeded) { dead_peer(""); }
// Through a mapping the dead peer's pages would still take the write: the device asks whether the
// owner lives.
TEST_F(CrossProcess, DeadPeerWithShmRetryExceeded) { dead_peer("EMU_TEST_PEER_BACKING=memfd"); }

void CrossProcess::dead_peer(const std::string& env) {
  ConnParams cp;
  cp.timeout = 10;  // 4.096 us * 2^10 ~ 4 ms per attempt
  cp.retry_cnt = 2;
  ASSERT_NO_FATAL_FAILURE(connect_peer("victim", cp, env));
  ASSERT_NO_FATAL_FAILURE(peer.kill_now());
  ibv_sge s = local.sge(0, 64);
  ibv_send_wr w = rdma_wr(9, IBV_WR_RDMA_WRITE, &s, 1, pi.addr, pi.rkey);
  ASSERT_EQ(post_one(qp, &w), 0);
  EXPECT_TRUE(wait_wc(cq, IBV_WC_RETRY_EXC_ERR, 9));
  EXPECT_EQ(qp_state(qp), IBV_QPS_ERR);
}

// Mappings here of other processes' registration files: a peer's pages this process's engine
// wrote through (its own file is mapped at the very addresses it mirrors, offset == start).
int peer_registration_mappings() {
  std::FILE* f = std::fopen("/proc/self/maps", "r");
  int n = 0;
  char line[512];
  while (f && std::fgets(line, sizeof line, f)) {
    unsigned long lo, hi, off;
    if (std::sscanf(line, "%lx-%lx %*s %lx", &lo, &hi, &off) == 3 && off != lo &&
        std::strstr(line, "rdmaemu-mr"))
      ++n;
  }
  if (f) std::fclose(f);
  return n;
}

// The engine here mapped the peer's moved pages to write them; once the peer is dead and swept,
// the next registration here unmaps them (the mapping would keep the dead peer's memory alive).
TEST_F(CrossProcess, ADeadPeersPagesAreUnmappedHere) {
  const char* moving = std::getenv("EMU_SHARED_MR");
  bool moved = !(moving && std::strcmp(moving, "0") == 0);
  ASSERT_NO_FATAL_FAILURE(connect_peer("victim", {}, ""));
  int before = peer_registration_mappings();
  ibv_sge s = local.sge(0, 64);
  ibv_send_wr w = rdma_wr(1, IBV_WR_RDMA_WRITE, &s, 1, pi.addr, pi.rkey);
  ASSERT_EQ(post_one(qp, &w), 0);
  ASSERT_TRUE(wait_wc(cq, IBV_WC_SUCCESS, 1));
  EXPECT_EQ(peer_registration_mappings(), before + (moved ? 1 : 0));
  ASSERT_NO_FATAL_FAILURE(peer.kill_now());
  std::string census = run_command(EMU_CTL " census");  // attaching sweeps the dead
  ASSERT_NE(make_buf(4096).mr, nullptr);                // a registration reaps
  EXPECT_EQ(peer_registration_mappings(), before) << census;
}

// Processes attaching to a fresh fabric at the same moment: each must get emu0 within the
// deadline. (The first attacher initializes the segment under its table lock; the others wait.)
// (Found a self-deadlock: a contended table lock during attach re-entered Segment::get().)
TEST(CrossProcessAttach, ConcurrentFirstAttach) {
  const char* dir = std::getenv("EMU_SHM_DIR");
  std::string shm_dir = dir && *dir ? dir : "/dev/shm";
  constexpr int kRounds = 10, kPeers = 6;
  int hung = 0, failed = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::string fabric = "attach-race-" + std::to_string(getpid()) + "-" + std::to_string(round);
    {
      Peer peers[kPeers];
      for (auto& pr : peers) ASSERT_TRUE(pr.spawn("attach", "EMU_FABRIC=" + fabric));
      auto until = std::chrono::steady_clock::now() + kDeadline;
      for (auto& pr : peers) {
        uint8_t ok = 0;
        if (!pr.recv_byte_by(&ok, until))
          ++hung;  // ~Peer kills what is left
        else if (ok != 1)
          ++failed;
      }
    }
    unlink((shm_dir + "/rdmaemu-" + std::to_string(getuid()) + "-" + fabric).c_str());
    if (hung) break;
  }
  EXPECT_EQ(hung, 0) << "attachers hung (no emu0 within " << kDeadline.count() << " s)";
  EXPECT_EQ(failed, 0) << "attachers did not find emu0";
}

}  // namespace
}  // namespace vt
