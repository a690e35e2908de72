// SPDX-License-Identifier: BSD-2-Clause
// The ids' registry, each channel's event queue, and the epoll set that makes a channel's fd
// readable when an event is queued or a peer's socket or a timer needs attention.
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cstring>

#include "emu/config.h"
#include "state.h"

namespace emu::prov::cm {

std::mutex& cm_mutex() {
  static std::mutex mu;
  return mu;
}

namespace {

// No other thread of the parent holds the lock in the child's copy of it (a thread blocked in
// GET_EVENT waits without it, so taking it here does not wait for an event). Here rather than in
// verbs/fork.cpp, so that the verbs room needs nothing of the CM's.
void prepare_fork() { cm_mutex().lock(); }
void after_fork() { cm_mutex().unlock(); }

[[maybe_unused]] const int g_fork_hooks = pthread_atfork(prepare_fork, after_fork, after_fork);

}  // namespace

std::map<uint32_t, Ctx>& ctxs() {
  static auto* m = new std::map<uint32_t, Ctx>;  // never destroyed: close() may run at exit
  return *m;
}

std::map<int, Channel>& channels() {
  static auto* m = new std::map<int, Channel>;
  return *m;
}

Ctx* find_ctx(uint32_t id) {
  auto it = ctxs().find(id);
  return it == ctxs().end() ? nullptr : &it->second;
}

uint32_t next_id() {
  static uint32_t next = 1;
  while (ctxs().count(next) || next == 0) ++next;
  return next++;
}

Event& push_event_ref(Ctx& c, uint32_t event, int32_t status) {
  Channel& ch = *c.channel;
  log("cm: id %u event %u status %d", c.id, event, status);
  Event e{};
  e.ctx_id = c.id;
  e.resp.uid = c.uid;
  e.resp.id = c.id;
  e.resp.event = event;
  e.resp.status = static_cast<uint32_t>(status);
  if (ch.queue.empty()) {
    uint64_t one = 1;
    (void)!::write(ch.eventfd, &one, sizeof one);  // level: readable until the queue drains
  }
  ch.queue.push_back(e);
  return ch.queue.back();
}

void push_event(Ctx& c, uint32_t event, int32_t status) { push_event_ref(c, event, status); }

void watch(Ctx& c, int fd, Source s) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = static_cast<uint64_t>(s) << 32 | c.id;
  epoll_ctl(c.channel->epfd, EPOLL_CTL_ADD, fd, &ev);
}

void unwatch(Ctx& c, int fd) {
  if (fd >= 0) epoll_ctl(c.channel->epfd, EPOLL_CTL_DEL, fd, nullptr);
}

void arm_timer(Ctx& c, uint32_t ms) {
  if (c.timer_fd < 0) {
    c.timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (c.timer_fd < 0) return;
    watch(c, c.timer_fd, Source::kTimer);
  }
  itimerspec its{};
  its.it_value.tv_sec = ms / 1000;
  its.it_value.tv_nsec = static_cast<long>(ms % 1000) * 1000000 + 1;  // 0 would disarm
  timerfd_settime(c.timer_fd, 0, &its, nullptr);
}

void disarm_timer(Ctx& c) {
  if (c.timer_fd < 0) return;
  itimerspec off{};
  timerfd_settime(c.timer_fd, 0, &off, nullptr);
}

uint32_t destroy_ctx(uint32_t id) {
  Ctx* c = find_ctx(id);
  if (!c) return 0;
  // The kernel drops an id's undelivered events with it; the count reported is what the program
  // was given (librdmacm waits for that many acks).
  Channel& ch = *c->channel;
  for (auto it = ch.queue.begin(); it != ch.queue.end();)
    it = it->ctx_id == id ? ch.queue.erase(it) : it + 1;
  if (ch.queue.empty()) {
    uint64_t v;
    (void)!::read(ch.eventfd, &v, sizeof v);
  }
  for (int* fd : {&c->bind_fd, &c->conn_fd, &c->timer_fd}) {
    if (*fd < 0) continue;
    unwatch(*c, *fd);
    close(*fd);  // the peer's process sees the socket close: DREQ or REJ to it
  }
  uint32_t reported = c->events_reported;
  // Connection requests a listener never reported go with it.
  std::vector<uint32_t> orphans;
  for (auto& [cid, other] : ctxs())
    if (other.listen_uid && other.listener_id == id && !other.reported) orphans.push_back(cid);
  ctxs().erase(id);
  for (uint32_t o : orphans) destroy_ctx(o);
  return reported;
}

}  // namespace emu::prov::cm
