// SPDX-License-Identifier: BSD-2-Clause
// Interrupt delivery: event records reach the owner's pipe, from the owner itself and from another
// process (through /proc/<pid>/fd), and a held lock of a dead process is taken over.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "emu/notify.h"
#include "emu/segment.h"

using namespace emu;

TEST(Notify, CompletionRecordReachesOwnPipe) {
  Segment* s = Segment::get();
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  CqSlot cq{};
  cq.owner = s->self();
  cq.chan_wfd = p[1];
  cq.chan_uid = s->new_uid();
  cq.uid = 4242;
  notify_comp(cq);
  CompEventRecord rec{};
  ASSERT_EQ(read(p[0], &rec, sizeof rec), (ssize_t)sizeof rec);
  EXPECT_EQ(rec.cq_uid, 4242u);
  close(p[0]);
  close(p[1]);
}

TEST(Notify, AsyncRecordReachesAnotherProcess) {
  Segment* s = Segment::get();
  Header* h = s->hdr();
  int fds[2], back[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(pipe(back), 0);
  pid_t child = fork();
  if (child == 0) {
    // The child owns an async pipe; the parent writes into it as a device would.
    int p[2];
    if (pipe(p) != 0) _exit(1);
    (void)!write(fds[1], &p[1], sizeof p[1]);
    AsyncEventRecord rec{};
    if (read(p[0], &rec, sizeof rec) != sizeof rec) _exit(2);
    (void)!write(back[1], &rec, sizeof rec);
    _exit(0);
  }
  int child_wfd;
  ASSERT_EQ(read(fds[0], &child_wfd, sizeof child_wfd), (ssize_t)sizeof child_wfd);
  uint32_t slot = kMaxProcs;
  for (uint32_t i = 0; i < kMaxProcs; ++i)
    if (h->procs[i].state.load() == kProcFree) {
      h->procs[i].pid = child;
      h->procs[i].start_time = proc_start_time(child);
      h->procs[i].state.store(kProcAlive);
      slot = i;
      break;
    }
  ASSERT_LT(slot, kMaxProcs);
  ContextSlot ctx{};
  ctx.owner = slot;
  ctx.async_wfd = child_wfd;
  ctx.uid = s->new_uid();
  notify_async(ctx, 77, kEvQpAccessErr);
  AsyncEventRecord got{};
  ASSERT_EQ(read(back[0], &got, sizeof got), (ssize_t)sizeof got);
  EXPECT_EQ(got.element_uid, 77u);
  EXPECT_EQ(got.type, kEvQpAccessErr);
  int st = 0;
  waitpid(child, &st, 0);
  EXPECT_EQ(WEXITSTATUS(st), 0);
  h->procs[slot].state.store(kProcFree);
}

TEST(ShmLock, DeadHoldersLockIsTakenOver) {
  Segment* s = Segment::get();
  Header* h = s->hdr();
  ShmLock* lock = s->at<ShmLock>(s->alloc(64));
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  uint32_t slot = kMaxProcs;
  for (uint32_t i = 0; i < kMaxProcs; ++i)
    if (h->procs[i].state.load() == kProcFree) {
      h->procs[i].pid = child;  // exited: its record still says alive, as after a SIGKILL
      h->procs[i].start_time = 1;
      h->procs[i].state.store(kProcAlive);
      slot = i;
      break;
    }
  ASSERT_LT(slot, kMaxProcs);
  ASSERT_TRUE(lock->try_lock(slot));
  EXPECT_FALSE(lock->try_lock(s->self())) << "held";
  bool took_over = false;
  EXPECT_TRUE(lock->try_lock_or_recover(s->self(), &took_over)) << "the holder is dead";
  EXPECT_TRUE(took_over) << "and says it was a dead holder's";
  lock->unlock();
  EXPECT_TRUE(lock->try_lock_or_recover(s->self(), &took_over));
  EXPECT_FALSE(took_over) << "a free lock is no one's";
  lock->unlock();
  lock->lock(s->self());  // and the blocking form works on a free lock
  lock->unlock();
  h->procs[slot].state.store(kProcFree);
  s->free(s->offset_of(lock));
}
