// SPDX-License-Identifier: BSD-2-Clause
// uctlite and emu-stress's message format, one thread at a time (the concurrent runs are the
// acceptance tests in tests/acceptance/stress.py). Runs under emu-run, on emu0.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "emudv_link.h"
#include "fabric.h"
#include "message.h"
#include "uctlite.h"

using namespace stress;
using namespace uctlite;

namespace {

TEST(StressMessage, NamesItselfAndCountsDifferingBytes) {
  for (uint32_t len : {8u, 9u, 15u, 16u, 40u, 226u, 4096u}) {
    std::vector<uint8_t> m(len);
    fill_message(m.data(), MessageId{3, 77}, len);
    MessageHeader h = read_header(m.data());
    EXPECT_EQ(h.thread, 3u);
    EXPECT_EQ(h.seq, 77u);
    EXPECT_EQ(h.length, len);
    EXPECT_EQ(count_differing(m.data(), len, MessageId{3, 77}, len), 0u);
    m[len - 1] ^= 0x5a;
    EXPECT_EQ(count_differing(m.data(), len, MessageId{3, 77}, len), 1u) << len;
    // Another message of the same length differs in nearly every byte past the header.
    EXPECT_GT(count_differing(m.data(), len, MessageId{3, 78}, len), (len - 8) / 2) << len;
  }
}

// One loopback RC pair on emu0 and a worker over it.
class UctliteTest : public ::testing::TestWithParam<Api> {
 protected:
  void SetUp() override {
    FabricConfig fc;
    fc.device = "emu0";
    fc.sq_depth = 64;
    fc.target_bytes = 1 << 20;
    std::string err;
    bool td_missing;
    ASSERT_TRUE(fabric_.setup(fc, &err, &td_missing)) << err;
    WorkerConfig wc;
    wc.api = GetParam();
    wc.mmio = MmioMode::bf_post_mt;
    worker_ = Worker::create(fabric_.initiator_ctx(), wc, &err);
    ASSERT_TRUE(worker_) << err;
    const QpPair& p = fabric_.pairs()[0];
    ep_ = worker_->add_ep(p.initiator, p.initiator_cq, &err);
    ASSERT_TRUE(ep_) << err;
  }

  PostArgs write_of(const std::vector<uint8_t>& msg, size_t target_off, uint64_t wr_id) {
    PostArgs a;
    a.op = Op::write;
    a.payload = msg.data();
    a.length = static_cast<uint32_t>(msg.size());
    a.raddr = reinterpret_cast<uintptr_t>(fabric_.target() + target_off);
    a.rkey = fabric_.target_rkey();
    a.wr_id = wr_id;
    return a;
  }

  // Polls until one completion arrives (the inline engine has completed every post by the time
  // post() returns, so a poll that finds nothing is a failure, not a wait).
  Completion poll_one() {
    Completion c;
    int n = ep_->poll(&c, 1);
    EXPECT_EQ(n, 1);
    return c;
  }

  Fabric fabric_;
  std::unique_ptr<Worker> worker_;
  Ep* ep_ = nullptr;
};

TEST_P(UctliteTest, WritesArriveAndCompletionsNameTheirPosts) {
  for (uint64_t i = 0; i < 300; ++i) {
    uint32_t len = 8 + static_cast<uint32_t>(i % 5) * 50;
    std::vector<uint8_t> msg(len);
    fill_message(msg.data(), MessageId{0, static_cast<uint32_t>(i)}, len);
    ASSERT_EQ(ep_->post(write_of(msg, i * 256, 1000 + i)), PostStatus::ok) << i;
    Completion c = poll_one();
    EXPECT_TRUE(c.matched);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.opcode, IBV_WC_RDMA_WRITE);
    EXPECT_EQ(c.wr_id, 1000 + i);
    EXPECT_EQ(count_differing(fabric_.target() + i * 256, len,
                              MessageId{0, static_cast<uint32_t>(i)}, len),
              0u);
  }
  std::optional<bool> idle = ep_->device_idle();
  ASSERT_TRUE(idle.has_value());
  EXPECT_TRUE(*idle);
}

TEST_P(UctliteTest, FullQueueIsReportedAndFreedByPolling) {
  std::vector<uint8_t> msg(8);
  fill_message(msg.data(), MessageId{0, 0}, 8);
  int posted = 0;
  while (ep_->post(write_of(msg, 0, posted)) == PostStatus::ok) ++posted;
  EXPECT_GE(posted, 64);
  Completion cs[16];
  int got = 0;
  while (int n = ep_->poll(cs, 16)) got += n;
  EXPECT_EQ(got, posted);
  EXPECT_EQ(ep_->post(write_of(msg, 0, 0)), PostStatus::ok);
}

INSTANTIATE_TEST_SUITE_P(Apis, UctliteTest, ::testing::Values(Api::verbs, Api::direct),
                         [](const auto& p) { return std::string(api_name(p.param)); });

// A WQE that wraps the end of the send ring goes to the BlueFlame buffer in two emudv_bf_copy
// calls, as emudv.h prescribes. They are one write: the device must neither report a torn
// BlueFlame WQE nor execute anything but the WQE (the fix in verbs_provider/verbs/emudv.cpp: before
// it, each call started a write of its own and the device saw the thread tear its own WQE).
TEST(UctliteDirect, RingWrappingBlueFlameWqeIsOneWrite) {
  const EmudvFns* dv = emudv_fns();
  ASSERT_TRUE(dv);
  FabricConfig fc;
  fc.device = "emu0";
  fc.target_bytes = 1 << 20;
  Fabric fabric;
  std::string err;
  bool td_missing;
  ASSERT_TRUE(fabric.setup(fc, &err, &td_missing)) << err;
  WorkerConfig wc;
  wc.api = Api::direct;
  wc.mmio = MmioMode::bf_post_mt;
  wc.thread_mode = ThreadMode::single;
  std::unique_ptr<Worker> worker = Worker::create(fabric.initiator_ctx(), wc, &err);
  ASSERT_TRUE(worker);
  const QpPair& p = fabric.pairs()[0];
  Ep* ep = worker->add_ep(p.initiator, p.initiator_cq, &err);
  ASSERT_TRUE(ep) << err;
  emudv_qp q;
  ASSERT_EQ(dv->init_qp(p.initiator, &q), 0);

  uint64_t races_before = dv->races_recorded();
  auto post_write = [&](uint32_t len, uint32_t seq) {
    std::vector<uint8_t> msg(len);
    fill_message(msg.data(), MessageId{0, seq}, len);
    PostArgs a;
    a.payload = msg.data();
    a.length = len;
    a.raddr = reinterpret_cast<uintptr_t>(fabric.target() + size_t(seq % 2048) * 256);
    a.rkey = fabric.target_rkey();
    a.wr_id = seq;
    ASSERT_EQ(ep->post(a), PostStatus::ok);
    Completion c;
    ASSERT_EQ(ep->poll(&c, 1), 1);
    ASSERT_EQ(c.status, IBV_WC_SUCCESS);
    ASSERT_EQ(c.wr_id, seq);
    EXPECT_EQ(
        count_differing(fabric.target() + size_t(seq % 2048) * 256, len, MessageId{0, seq}, len),
        0u);
  };
  // One-block WRITEs (8 bytes inline: 48 bytes of WQE) up to two blocks before the ring's end,
  // then a four-block one (180 bytes inline) that takes the last two blocks and the first two.
  uint32_t seq = 0;
  for (; seq < q.sq_wqe_cnt - 2; ++seq) post_write(8, seq);
  post_write(180, seq++);
  post_write(180, seq++);
  emudv_race ev[4];
  int n = dv->read_races(races_before, ev, 4);
  EXPECT_EQ(n, 0) << (n ? ev[0].kind_name : "") << " threads " << (n ? ev[0].writer_tids[0] : 0)
                  << "," << (n ? ev[0].writer_tids[1] : 0);
}

}  // namespace
