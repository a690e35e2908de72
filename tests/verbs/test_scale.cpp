// SPDX-License-Identifier: BSD-2-Clause
// Many QPs in one process (issue 18 item 3): the object tables grow in chunks as slots are handed
// out (docs/design/segment-and-heap.md, "Object tables"). N RC QPs are made, connected in pairs to
// each other (loopback in this process), each pair carries one data-checked SEND, then every QP is
// destroyed: the census then lists exactly the objects it listed before (none of the QPs), no
// leaked heap block, and the device recorded no race.
#include <cstdio>
#include <string>
#include <vector>

#include "emudv_link.h"
#include "verbs_fixture.h"

namespace vt {
namespace {

constexpr uint32_t kMsg = 32;  // bytes per message
// A bound against a hang while 10,000 QPs complete on a loaded machine, not a timing assertion.
constexpr std::chrono::seconds kScaleDeadline{300};

// emu-ctl census --json, whole.
std::string census_json() {
  FILE* f = popen(EMU_CTL " census --json", "r");
  if (!f) return "";
  std::string s;
  char b[4096];
  for (size_t n; (n = fread(b, 1, sizeof b, f)) > 0;) s.append(b, n);
  return pclose(f) == 0 ? s : "";
}

size_t count_of(const std::string& s, const std::string& key) {
  size_t n = 0;
  for (size_t at = s.find(key); at != std::string::npos; at = s.find(key, at + 1)) ++n;
  return n;
}

class Scale : public VerbsTest {
 protected:
  void run(int n_qps);
};

void Scale::run(int n_qps) {
  const uctlite::EmudvFns* dv = uctlite::emudv_fns();
  ASSERT_NE(dv, nullptr);
  const uint32_t pairs = static_cast<uint32_t>(n_qps) / 2;
  ibv_cq* scq = make_cq(static_cast<int>(pairs));
  ibv_cq* rcq = make_cq(static_cast<int>(pairs));
  ASSERT_TRUE(scq && rcq);
  Buf src = make_buf(pairs * kMsg), dst = make_buf(pairs * kMsg);
  const std::string owner = "\"owner_pid\":" + std::to_string(getpid()) + ",";
  std::string before = census_json();
  ASSERT_FALSE(before.empty());
  const uint64_t races = dv->races_recorded();

  std::vector<ibv_qp*> made;
  made.reserve(n_qps);
  QpCaps caps;
  caps.max_send_wr = caps.max_recv_wr = caps.max_send_sge = caps.max_recv_sge = 1;
  for (int i = 0; i < n_qps; ++i) {
    ibv_qp* qp = create_rc_qp(pd, scq, rcq, caps);
    ASSERT_NE(qp, nullptr) << "QP " << i << ": errno " << errno;
    made.push_back(qp);
  }
  for (uint32_t p = 0; p < pairs; ++p) {
    ibv_qp* a = made[2 * p];
    ibv_qp* b = made[2 * p + 1];
    ASSERT_EQ(connect_qp(a, lid, b->qp_num, p, p + 1), 0) << "pair " << p;
    ASSERT_EQ(connect_qp(b, lid, a->qp_num, p + 1, p), 0) << "pair " << p;
  }
  // Each pair's message is its own pattern, so a message delivered to another pair's buffer shows.
  auto seed = [](uint32_t p) { return static_cast<uint8_t>(p); };
  auto step = [](uint32_t p) { return static_cast<uint8_t>(1 + (p >> 8)); };
  for (uint32_t p = 0; p < pairs; ++p) {
    ibv_sge rs = dst.sge(p * kMsg, kMsg);
    ibv_recv_wr rw{};
    rw.wr_id = p;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    ibv_recv_wr* bad_r = nullptr;
    ASSERT_EQ(ibv_post_recv(made[2 * p + 1], &rw, &bad_r), 0) << "pair " << p;
    fill_pattern(src.p + p * kMsg, kMsg, seed(p), step(p));
  }
  for (uint32_t p = 0; p < pairs; ++p) {
    ibv_sge ss = src.sge(p * kMsg, kMsg);
    ibv_send_wr sw = send_wr(p, IBV_WR_SEND, &ss, 1);
    ibv_send_wr* bad_s = nullptr;
    ASSERT_EQ(ibv_post_send(made[2 * p], &sw, &bad_s), 0) << "pair " << p;
  }
  for (ibv_cq* cq : {scq, rcq}) {
    std::vector<ibv_wc> wcs = poll_n(cq, pairs, kScaleDeadline);
    ASSERT_EQ(wcs.size(), pairs);
    std::vector<uint8_t> seen(pairs, 0);
    for (const ibv_wc& wc : wcs) {
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "wr_id " << wc.wr_id;
      ASSERT_LT(wc.wr_id, pairs);
      EXPECT_EQ(seen[wc.wr_id]++, 0) << "wr_id " << wc.wr_id << " completed twice";
    }
  }
  for (uint32_t p = 0; p < pairs; ++p)
    EXPECT_TRUE(has_pattern(dst.p + p * kMsg, kMsg, seed(p), step(p))) << "pair " << p;

  for (ibv_qp* qp : made) EXPECT_EQ(ibv_destroy_qp(qp), 0);
  std::string after = census_json();
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(count_of(after, owner), count_of(before, owner)) << "objects of ours left behind";
  EXPECT_EQ(count_of(after, "\"leaked_heap_blocks\":0,"), 1u) << "heap blocks leaked";
  EXPECT_EQ(dv->races_recorded(), races) << "the device recorded a race";
}

// The ctest default (labels verbs and scale): a size every run can afford.
TEST_F(Scale, ThousandQpsInPairsEachCarryOneMessage) { run(1000); }

// Label scale only (its own ctest entry: tests/verbs/CMakeLists.txt), in a segment of the
// default size, whose heap grows to hold them.
TEST_F(Scale, TenThousandQpsInPairsEachCarryOneMessage) { run(10000); }

}  // namespace
}  // namespace vt
