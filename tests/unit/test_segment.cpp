// SPDX-License-Identifier: BSD-2-Clause
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "emu/segment.h"
#include "emu/wqe.h"
#include "spawn_self.h"

using namespace emu;

namespace {

// EMU_UNIT_PROBE=attach: this process only attaches to $EMU_FABRIC and exits 0 if that worked,
// 3 (printing the error) if it was refused. Runs before GoogleTest starts.
__attribute__((constructor)) void maybe_probe() {
  const char* probe = std::getenv("EMU_UNIT_PROBE");
  if (!probe || std::string(probe) != "attach") return;
  Segment* s = Segment::get();
  if (!s) {
    std::fprintf(stdout, "%s\n", Segment::last_error().c_str());
    std::fflush(stdout);
    _exit(3);
  }
  _exit(0);
}

// Runs this binary as an attach probe on `fabric`, which it marks persistent (the file stays for
// the test to inspect, whatever attaches in between); returns its exit status and output.
int probe_attach(const std::string& fabric, std::string* out) {
  int rc =
      spawn_self({"EMU_UNIT_PROBE=attach", "EMU_FABRIC=" + fabric, "EMU_FABRIC_PERSIST=1"}, out);
  return rc < 0 ? -1 : rc;
}

}  // namespace

TEST(Segment, AttachesAndRegistersThisProcess) {
  Segment* s = Segment::get();
  ASSERT_NE(s, nullptr) << Segment::last_error();
  Header* h = s->hdr();
  EXPECT_EQ(h->magic, kMagic);
  EXPECT_EQ(h->layout_version, kLayoutVersion);
  EXPECT_GE(h->num_devices, 1u);
  EXPECT_STREQ(h->devices[0].name, "emu0");
  EXPECT_EQ(h->procs[s->self()].pid, getpid());
  EXPECT_TRUE(s->proc_alive(s->self()));
  EXPECT_NE(h->devices[0].ports[0].lid, 0);
}

TEST(Segment, QpNumbersCarryAGeneration) {
  Segment* s = Segment::get();
  uint32_t i;
  ASSERT_EQ(s->alloc_qp(&i), Status::ok);
  uint32_t qpn = qp_slot(s->hdr(), i).qpn;
  EXPECT_EQ(s->find_qp(qpn), &qp_slot(s->hdr(), i));
  EXPECT_GT(qpn, 1u) << "QPs 0 and 1 are special";
  qp_slot(s->hdr(), i).state.store(kSlotFree);
  EXPECT_EQ(s->find_qp(qpn), nullptr);
  uint32_t j;
  s->hdr()->qp_dir.next = i;  // the next-fit search would come back to it later: now
  ASSERT_EQ(s->alloc_qp(&j), Status::ok);
  EXPECT_EQ(i, j) << "the free slot is reused";
  EXPECT_NE(qp_slot(s->hdr(), j).qpn, qpn) << "but a stale number does not find the new QP";
  EXPECT_EQ(s->find_qp(qpn), nullptr);
  qp_slot(s->hdr(), j).state.store(kSlotFree);
}

TEST(Segment, MrKeysAreCheckedWhole) {
  Segment* s = Segment::get();
  uint32_t i;
  ASSERT_EQ(s->alloc_mr(&i), Status::ok);
  uint32_t key = mr_slot(s->hdr(), i).key;
  EXPECT_NE(s->find_mr(key), nullptr);
  EXPECT_EQ(s->find_mr(key ^ 1), nullptr);
  EXPECT_EQ(s->find_mr(0xffffffffu), nullptr);
  mr_slot(s->hdr(), i).state.store(kSlotFree);
  EXPECT_EQ(s->find_mr(key), nullptr);
}

TEST(Segment, AllocationIsZeroedAndAligned) {
  Segment* s = Segment::get();
  uint64_t off = s->alloc(10000, 4096);
  ASSERT_NE(off, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s->at(off)) % 4096, 0u);
  auto* p = s->at<unsigned char>(off);
  for (int i = 0; i < 10000; ++i) ASSERT_EQ(p[i], 0);
  s->free(off);
}

// A child registered as its own process (through fork it shares the mapping) that holds one QP
// and waits to be killed: its pid, process slot and QP index.
struct QpHolder {
  pid_t pid;
  uint32_t slot, q;
};

static QpHolder start_qp_holder(Header* h) {
  QpHolder out{0, kMaxProcs, kMaxQps};
  uint32_t first;  // a QP chunk exists (tables grow by chunks) for the child to take a slot in
  if (Segment::get()->alloc_qp(&first) == Status::ok) qp_slot(h, first).state.store(kSlotFree);
  int fds[2];
  if (pipe(fds) != 0) return out;
  pid_t child = fork();
  if (child == 0) {
    uint32_t slot = kMaxProcs;
    {
      ShmLockGuard g(h->table_lock, kMaxProcs);
      for (uint32_t i = 0; i < kMaxProcs; ++i)
        if (h->procs[i].state.load() == kProcFree) {
          h->procs[i].pid = getpid();
          h->procs[i].start_time = proc_start_time(getpid());
          h->procs[i].state.store(kProcAlive);
          slot = i;
          break;
        }
    }
    uint32_t q = kMaxQps;
    for (uint32_t i = 0; i < table_end(h->qp_dir); ++i)
      if (qp_slot(h, i).state.load() == kSlotFree) {
        qp_slot(h, i).owner = slot;
        qp_slot(h, i).state.store(kSlotLive);
        q = i;
        break;
      }
    (void)!write(fds[1], &q, sizeof q);
    (void)!write(fds[1], &slot, sizeof slot);
    pause();
    _exit(0);
  }
  out.pid = child;
  EXPECT_EQ(read(fds[0], &out.q, sizeof out.q), (ssize_t)sizeof out.q);
  EXPECT_EQ(read(fds[0], &out.slot, sizeof out.slot), (ssize_t)sizeof out.slot);
  close(fds[0]);
  close(fds[1]);
  return out;
}

TEST(Segment, DeadProcessObjectsAreSweptAtTheNextAttach) {
  Segment* s = Segment::get();
  Header* h = s->hdr();
  auto [child, slot, q] = start_qp_holder(h);
  ASSERT_LT(q, kMaxQps);
  EXPECT_TRUE(s->proc_alive(slot));
  EXPECT_EQ(s->sweep_dead(), 0) << "a live process is left alone";
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_FALSE(s->proc_alive(slot));
  EXPECT_EQ(s->sweep_dead(), 1);
  EXPECT_EQ(qp_slot(h, q).state.load(), kSlotFree);
  EXPECT_EQ(h->procs[slot].state.load(), kProcFree);
}

// A sweeper killed part way (verbs_provider/verbs/xrc.cpp sweeps inside open_xrcd and open_qp, so a
// process killed there dies mid-sweep) leaves the record it was releasing marked dead: the next
// sweep finishes it.
TEST(Segment, ASweepLeftHalfDoneByItsDeadSweeperIsFinished) {
  Segment* s = Segment::get();
  Header* h = s->hdr();
  auto [child, slot, q] = start_qp_holder(h);
  ASSERT_LT(q, kMaxQps);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  h->procs[slot].state.store(kProcDead);  // what the dead sweeper left
  EXPECT_EQ(s->sweep_dead(), 1);
  EXPECT_EQ(qp_slot(h, q).state.load(), kSlotFree);
  EXPECT_EQ(h->procs[slot].state.load(), kProcFree);
}

// A process killed inside its own send queue's run leaves its lock held and its head WQE perhaps
// delivered and not completed. The sweep frees the lock before it marks the QP dying: a runner of
// another process taking the lock in between must find the QP in ERR (flushed, not run again),
// or the head would be delivered twice.
TEST(Segment, TheSweepStopsASendQueueItsDeadOwnerWasRunningBeforeItFreesTheLock) {
  Segment* s = Segment::get();
  Header* h = s->hdr();
  auto [child, slot, q] = start_qp_holder(h);
  ASSERT_LT(q, kMaxQps);
  QpSlot& qp = qp_slot(h, q);
  qp.qp_state.store(kQpsRts);
  qp.sq_engine.word.store(slot + 1);  // the child died holding it
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  std::atomic<uint32_t> state_seen{~0u};
  std::thread runner([&] {  // a plain try, as a runner that comes after the sweep's release
    while (!qp.sq_engine.try_lock(s->self())) std::this_thread::yield();
    state_seen.store(qp.qp_state.load());
    qp.sq_engine.unlock();
  });
  EXPECT_EQ(s->sweep_dead(), 1);
  runner.join();
  EXPECT_EQ(state_seen.load(), static_cast<uint32_t>(kQpsErr));
  EXPECT_EQ(qp.state.load(), kSlotFree);
}

TEST(Segment, NoMrEverGetsTheListTerminatorKey) {
  Segment* s = Segment::get();
  Header* h = s->hdr();
  uint32_t first;
  ASSERT_EQ(s->alloc_mr(&first), Status::ok);  // the table's first chunk exists from here on
  // A key is index << 8 | generation: only slot 1 could make 0x100. The search is next-fit (a
  // freed slot comes back only after every other, layout.h SlotDir), so its hint is set back to
  // slot 1 before each allocation: the same slot through every generation of the key byte.
  for (int i = 0; i < 600; ++i) {  // more than one full cycle of the generation byte
    uint32_t idx;
    h->mr_dir.next = 1;
    ASSERT_EQ(s->alloc_mr(&idx), Status::ok);
    EXPECT_NE(mr_slot(h, idx).key, kInvalidLkey);
    mr_slot(h, idx).state.store(kSlotFree);
    ASSERT_EQ(idx, 1u) << "slot 1 was taken before the test";
  }
  mr_slot(h, first).state.store(kSlotFree);
}

TEST(Segment, FileIsPrivateToItsUser) {
  Segment* s = Segment::get();
  ASSERT_NE(s, nullptr);
  struct stat st;
  ASSERT_EQ(stat(config().segment_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, getuid());
}

TEST(Segment, AnotherLayoutVersionIsRefusedWithAClearError) {
  std::string fabric = "layout-" + std::to_string(getpid());
  std::string path = "/dev/shm/rdmaemu-" + std::to_string(getuid()) + "-" + fabric;
  std::string out;
  ASSERT_EQ(probe_attach(fabric, &out), 0) << out;  // made with this build's layout
  {
    // Rewrite the version as an older build would have left it.
    FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::vector<char> all(1 << 20);
    size_t n = std::fread(all.data(), 1, all.size(), f);
    uint64_t magic = kMagic;
    bool patched = false;
    for (size_t i = 0; i + 16 <= n && !patched; i += 8)
      if (std::memcmp(all.data() + i, &magic, 8) == 0) {
        uint32_t other = kLayoutVersion + 100;
        std::fseek(f, static_cast<long>(i + 8), SEEK_SET);
        std::fwrite(&other, 4, 1, f);
        patched = true;
      }
    std::fclose(f);
    ASSERT_TRUE(patched) << "header not found in the segment file";
  }
  out.clear();
  EXPECT_EQ(probe_attach(fabric, &out), 3);
  EXPECT_NE(out.find("layout version " + std::to_string(kLayoutVersion + 100)), std::string::npos)
      << out;
  EXPECT_NE(out.find(path), std::string::npos) << "the message names the file: " << out;
  unlink(path.c_str());
}
