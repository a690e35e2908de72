// SPDX-License-Identifier: BSD-2-Clause
// The segment's life (docs/design/segment-and-heap.md, "The segment's life and size"): removed by
// its last process, by the next attach after a SIGKILL, kept when persistent; tmpfs pages taken as
// it grows and a full tmpfs an allocation failure with a message; the unlink race closed by the
// life lock.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "emu/fabrics.h"
#include "emu/segment.h"
#include "shm/segment_file.h"
#include "spawn_self.h"

using namespace emu;

namespace {

// EMU_UNIT_PROBE=life-*: this process attaches to $EMU_FABRIC in $EMU_SHM_DIR (exit 3 with the
// error if refused), then: life-exit exits normally (its exit handlers run), life-die SIGKILLs
// itself, life-die-qp takes a QP slot (the QP table's first heap chunk) and SIGKILLs itself,
// life-limit allocates 8 MiB and then 4 KiB and prints "big=<0|1> small=<0|1>".
__attribute__((constructor)) void maybe_probe() {
  const char* probe = std::getenv("EMU_UNIT_PROBE");
  if (!probe || std::strncmp(probe, "life-", 5) != 0) return;
  Segment* s = Segment::get();
  if (!s) {
    std::fprintf(stdout, "%s\n", Segment::last_error().c_str());
    std::fflush(stdout);
    _exit(3);
  }
  std::string mode = probe + 5;
  if (mode == "die") raise(SIGKILL);
  if (mode == "die-qp") {
    uint32_t qp = 0;
    if (s->alloc_qp(&qp) == Status::ok) raise(SIGKILL);
    _exit(4);
  }
  if (mode == "limit") {
    bool big = s->alloc(8u << 20) != 0;
    bool small = s->alloc(4096) != 0;
    std::fprintf(stdout, "big=%d small=%d\n", big, small);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::exit(0);
}

// A directory of this test's own, so that what is left in it is what the test made.
struct ShmDir {
  std::string path;
  ShmDir() {
    const char* base = std::getenv("EMU_SHM_DIR");
    std::string tmpl = std::string(base && *base ? base : "/dev/shm") + "/life-XXXXXX";
    path = mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~ShmDir() {
    for (const std::string& f : files()) unlink(seg(f).c_str());
    rmdir(path.c_str());
  }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    Config c = config_from_env();
    c.shm_dir = path;
    for (const FabricInfo& f : list_fabrics(c)) out.push_back(f.name);
    return out;
  }
  std::string seg(const std::string& fabric) const {
    return path + "/rdmaemu-" + std::to_string(getuid()) + "-" + fabric;
  }
  Config config(const std::string& fabric = "x") const {
    Config c = config_from_env();
    c.shm_dir = path;
    c.fabric = fabric;
    return c;
  }
};

// Runs this binary as probe `mode` on `fabric` in `dir` with extra K=V settings.
int probe(const ShmDir& dir, const std::string& mode, const std::string& fabric,
          std::vector<std::string> extra, std::string* out) {
  extra.push_back("EMU_UNIT_PROBE=life-" + mode);
  extra.push_back("EMU_FABRIC=" + fabric);
  extra.push_back("EMU_SHM_DIR=" + dir.path);
  return spawn_self(extra, out);
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

uint64_t reserved_bytes() {
  struct stat st;
  return stat(config().segment_path().c_str(), &st) == 0 ? uint64_t(st.st_blocks) * 512 : 0;
}

}  // namespace

TEST(SegmentLife, LastProcessToExitRemovesTheFile) {
  ShmDir d;
  std::string out;
  EXPECT_EQ(probe(d, "exit", "a", {}, &out), 0) << out;
  EXPECT_TRUE(d.files().empty()) << "the fabric is gone with its only process";
}

TEST(SegmentLife, AKilledFabricGoesAtTheNextAttachOfAnyFabric) {
  ShmDir d;
  std::string out;
  ASSERT_EQ(probe(d, "die", "killed", {}, &out), -SIGKILL) << out;
  EXPECT_TRUE(exists(d.seg("killed"))) << "nobody has attached since";
  ASSERT_EQ(probe(d, "exit", "next", {}, &out), 0) << out;
  EXPECT_FALSE(exists(d.seg("killed")));
  EXPECT_TRUE(d.files().empty());
}

// The tables live in heap chunks past the Header: reading another fabric's QP table (whether it
// keeps XRC objects) must reach them through a mapping of the whole file, not of the Header only
// (that read past the mapping crashed ibv_rc_pingpong in accept.shm_life).
TEST(SegmentLife, AKilledFabricWithAQpTableIsListedAndRemoved) {
  ShmDir d;
  std::string out;
  ASSERT_EQ(probe(d, "die-qp", "tables", {}, &out), -SIGKILL) << out;
  std::vector<FabricInfo> list = list_fabrics(d.config());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_TRUE(list[0].readable);
  EXPECT_EQ(list[0].live_procs, 0u);
  EXPECT_EQ(list[0].kept_objects, 0u);
  ASSERT_EQ(probe(d, "exit", "next", {}, &out), 0) << out;
  EXPECT_FALSE(exists(d.seg("tables")));
  EXPECT_TRUE(d.files().empty());
}

TEST(SegmentLife, APersistentFabricStaysUntilRemoved) {
  ShmDir d;
  std::string out;
  ASSERT_EQ(probe(d, "exit", "kept", {"EMU_FABRIC_PERSIST=1"}, &out), 0) << out;
  ASSERT_EQ(probe(d, "exit", "other", {}, &out), 0) << out;
  std::vector<FabricInfo> list = list_fabrics(d.config());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].name, "kept");
  EXPECT_TRUE(list[0].readable);
  EXPECT_TRUE(list[0].persistent);
  EXPECT_EQ(list[0].live_procs, 0u);
  std::string why;
  EXPECT_EQ(remove_fabric(d.config(), "kept", false, &why), Status::ok) << why;
  EXPECT_TRUE(d.files().empty());
  EXPECT_EQ(remove_fabric(d.config(), "kept", false, &why), Status::not_found);
}

TEST(SegmentLife, RemoveIsRefusedWhileAProcessIsAttached) {
  ASSERT_NE(Segment::get(), nullptr);
  std::string why;
  EXPECT_EQ(remove_fabric(config(), config().fabric, false, &why), Status::busy);
  EXPECT_NE(why.find("1 live process"), std::string::npos) << why;
  EXPECT_TRUE(exists(config().segment_path()));
}

TEST(SegmentLife, AFreshFabricHoldsItsHeaderAndBookkeepingOnly) {
  ASSERT_NE(Segment::get(), nullptr);
  // The header (every page of it: a read of a hole in a tmpfs mapping takes a page too) and the
  // bookkeeping of the heap's first growth step (a MiB of heap), not the heap, and not the
  // bookkeeping of all EMU_SHM_SIZE (1/50 of it: 80 MiB of the default 4 GiB).
  EXPECT_GE(reserved_bytes(), sizeof(Header));
  EXPECT_LT(reserved_bytes(), sizeof(Header) + (512u << 10))
      << "of a " << (config().shm_size >> 20) << " MiB segment";
}

TEST(SegmentLife, HeapBlocksTakeAndGiveBackTheirPages) {
  Segment* s = Segment::get();
  ASSERT_NE(s, nullptr);
  // Once first: the heap grows to hold it, and the bookkeeping of a grown heap stays.
  uint64_t warm = s->alloc(4u << 20);
  ASSERT_NE(warm, 0u);
  s->free(warm);
  uint64_t before = reserved_bytes();
  uint64_t off = s->alloc(4u << 20);
  ASSERT_NE(off, 0u);
  EXPECT_GE(reserved_bytes(), before + (4u << 20));
  s->free(off);
  EXPECT_LE(reserved_bytes(), before);
}

TEST(SegmentLife, AFullTmpfsIsAFailedAllocationWithAMessage) {
  ShmDir d;
  std::string out;
  // Room for the header and the heap's bookkeeping (under 3 MiB of a 64 MiB segment since the
  // object tables left the header for heap chunks; it was about 7 MiB with them), not 8 MiB more.
  ASSERT_EQ(probe(d, "limit", "full", {"EMU_SHM_LIMIT=8M", "EMU_SHM_SIZE=64M"}, &out), 0) << out;
  EXPECT_NE(out.find("big=0 small=1"), std::string::npos) << out;
  EXPECT_NE(out.find("EMU_SHM_DIR=" + d.path), std::string::npos) << out;
  EXPECT_NE(out.find("8192 KiB"), std::string::npos) << "the size asked: " << out;
  EXPECT_TRUE(d.files().empty()) << "and the fabric went with its process";
}

TEST(SegmentLife, AnAttachWithNoRoomLeavesNoFile) {
  ShmDir d;
  std::string out;
  ASSERT_EQ(probe(d, "exit", "tiny", {"EMU_SHM_LIMIT=256K"}, &out), 3) << out;
  EXPECT_NE(out.find("EMU_SHM_DIR=" + d.path), std::string::npos) << out;
  std::vector<std::string> left;
  if (DIR* dir = opendir(d.path.c_str())) {
    while (dirent* e = readdir(dir))
      if (e->d_name[0] != '.') left.push_back(e->d_name);
    closedir(dir);
  }
  EXPECT_TRUE(left.empty()) << left.size() << " files left, first " << left[0];
}

TEST(SegmentLife, StillLinkedTellsARemovedOrReplacedFile) {
  ShmDir d;
  std::string path = d.path + "/f";
  int fd = open(path.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(still_linked(fd, path));
  unlink(path.c_str());
  EXPECT_FALSE(still_linked(fd, path));
  int fd2 = open(path.c_str(), O_RDWR | O_CREAT, 0600);  // a new file under the old name
  ASSERT_GE(fd2, 0);
  EXPECT_FALSE(still_linked(fd, path));
  EXPECT_TRUE(still_linked(fd2, path));
  close(fd);
  close(fd2);
  unlink(path.c_str());
}

// The race a removal has with an attacher: the attacher opened the file, the last process removes
// it before the attacher holds the lock. The attacher must not use the removed file (a fabric
// split in two) but make a new one.
TEST(SegmentLife, AnAttacherThatLostTheRaceToARemovalMakesANewSegment) {
  ShmDir d;
  std::string out;
  ASSERT_EQ(probe(d, "die", "raced", {}, &out), -SIGKILL) << out;
  std::string path = d.seg("raced");
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct stat old_st;
  ASSERT_EQ(fstat(fd, &old_st), 0);
  ASSERT_TRUE(life_lock(fd, true));  // as a detaching last process holds it
  // The attacher opens the old file and waits for the lock (seen in /proc/locks as a waiter).
  pid_t pid = fork();
  if (pid == 0) {
    close(fd);  // the parent's copy keeps the lock
    std::string o;
    _exit(probe(d, "die", "raced", {}, &o) == -SIGKILL ? 0 : 1);
  }
  std::string want = ":" + std::to_string(old_st.st_ino) + " ";
  bool waiting = false;
  for (int polls = 0; !waiting && polls < 100000; ++polls) {
    std::ifstream locks("/proc/locks");
    for (std::string line; std::getline(locks, line);)
      waiting =
          waiting || (line.find("->") != std::string::npos && line.find(want) != std::string::npos);
    if (!waiting) sched_yield();
  }
  EXPECT_TRUE(waiting) << "the attacher never waited on the lock";
  unlink(path.c_str());
  close(fd);  // the lock goes with the last descriptor of its open file
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  struct stat new_st;
  ASSERT_EQ(stat(path.c_str(), &new_st), 0) << "the attacher made a new segment (and died)";
  EXPECT_NE(new_st.st_ino, old_st.st_ino);
}
