// SPDX-License-Identifier: BSD-2-Clause
// emu-stress: many threads posting self-checking RDMA WRITEs or SENDs through uctlite, in one
// process, over loopback RC QP pairs; reports rates, what arrived corrupted, completions that came
// twice or never, and the race events the device recorded meanwhile (docs/guides/stress.md).
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <latch>
#include <mutex>
#include <thread>

#include "emudv_link.h"
#include "fabric.h"
#include "options.h"
#include "races.h"
#include "report.h"
#include "run.h"
#include "uctlite.h"

using namespace stress;

namespace {

constexpr int kExitDirty = 1;
constexpr int kExitSetup = 2;
// How often the main thread reads the device's race log while the posters run: it keeps only
// the last 1024 events, and racing posters can make a hundred a millisecond. A collection
// interval, not a synchronization.
constexpr auto kCollectEvery = std::chrono::milliseconds(2);

int setup_failed(const std::string& why) {
  std::fprintf(stderr, "emu-stress: %s\n", why.c_str());
  return kExitSetup;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const int status = parse_options(argc, argv, &o);
  if (status >= 0) return status;
  std::string err;
  Run run(o);
  FabricConfig fc;
  fc.device = o.device;
  fc.qps = o.qps;
  fc.threads = o.threads;
  fc.td = o.td;
  fc.sq_depth = o.sq_depth;
  fc.rq_depth = o.rq_depth;
  fc.max_inline = o.max_inline;
  fc.source_bytes = run.source_bytes();
  fc.target_bytes = run.target_bytes();
  Fabric fabric;
  bool td_missing = false;
  if (!fabric.setup(fc, &err, &td_missing)) {
    if (td_missing) err += " — this provider has no thread domains (ibv_alloc_td failed)";
    return setup_failed(err);
  }
  uctlite::WorkerConfig wc;
  wc.api = o.api;
  wc.mmio = o.mmio;
  wc.plain_stores = o.plain_stores;
  wc.thread_mode = o.thread_mode;
  std::unique_ptr<uctlite::Worker> worker =
      uctlite::Worker::create(fabric.initiator_ctx(), wc, &err);
  if (!worker || !run.attach(fabric, *worker, &err)) return setup_failed(err);

  RaceCollector races(uctlite::emudv_fns(), o.races_shown);
  races.start();
  std::latch start(o.threads + 1);
  std::mutex mu;
  std::condition_variable cv;
  uint32_t finished = 0;
  std::vector<std::thread> posters;
  for (uint32_t t = 0; t < o.threads; ++t)
    posters.emplace_back([&, t] {
      start.arrive_and_wait();
      run.poster(t);
      std::lock_guard<std::mutex> g(mu);
      ++finished;
      cv.notify_all();
    });
  std::thread receiver;
  if (o.op == uctlite::Op::send) receiver = std::thread([&] { run.receiver(); });

  start.arrive_and_wait();
  auto t0 = std::chrono::steady_clock::now();
  auto deadline = t0 + std::chrono::milliseconds(o.duration_ms);
  {
    std::unique_lock<std::mutex> lk(mu);
    while (finished < o.threads) {
      cv.wait_for(lk, kCollectEvery);
      if (o.duration_ms && std::chrono::steady_clock::now() >= deadline) run.stop_posting();
      lk.unlock();
      races.collect();
      lk.lock();
    }
  }
  for (std::thread& th : posters) th.join();
  double post_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  DrainResult drain = run.drain([&] { races.collect(); });
  if (receiver.joinable()) {
    run.stop_receiving();
    receiver.join();
  }
  run.sweep();
  races.collect();

  const char* engine = std::getenv("EMU_ENGINE");
  Report report{run,   races,        run.tally(),
                drain, post_seconds, engine && *engine ? engine : "inline"};
  report.print_text(stdout);
  if (!o.json_path.empty() && !report.write_json(o.json_path, &err)) return setup_failed(err);
  return o.expect_clean && !report.clean() ? kExitDirty : 0;
}
