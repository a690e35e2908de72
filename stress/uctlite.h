// SPDX-License-Identifier: BSD-2-Clause
// uctlite: a small UCT-style posting library. An endpoint (Ep) is one connected RC QP and the CQ
// its sends complete into; a Worker owns the endpoints of one device context and what UCT keeps
// per worker: the worker lock (thread mode) and the doorbell registers its QPs share.
//
// Two ways to post:
//   api = verbs   ibv_post_send (IBV_SEND_INLINE or one SGE) and ibv_poll_cq; any device.
//   api = direct  what UCX's rc_mlx5 transport does over mlx5, through emudv.h (emulated devices
//                 only): the WQE is built and written into the send ring at the software producer
//                 index, the index moves on, the doorbell record is stored, then the register is
//                 written as the MMIO mode says; the CQ is read directly (owner bit).
//
// MMIO modes (direct), as UCX chooses them by thread mode (docs/guides/stress.md):
//   bf_post     BlueFlame copy of the WQE and flush, no lock          (UCS_THREAD_MODE_SINGLE)
//   bf_post_mt  BlueFlame copy and flush under the register's lock    (SERIALIZED)
//   db_lock     8-byte doorbell under the register's lock             (no thread domain)
// QPs of a context whose emudv register is the same (emudv_uar.opaque) share one Register: one
// lock and one BlueFlame buffer toggle, as UCT shares its mmio register object.
//
// Thread modes:
//   single      no library lock: what a SINGLE worker does when two threads use it anyway
//   serialized  the worker lock around each post and each poll (UCP's MULTI worker over a
//               SERIALIZED UCT interface)
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace uctlite {

enum class Api { verbs, direct };
enum class MmioMode { bf_post, bf_post_mt, db_lock };
enum class ThreadMode { single, serialized };
enum class Op { write, send };

const char* api_name(Api a);
const char* mmio_name(MmioMode m);
const char* thread_mode_name(ThreadMode t);
const char* op_name(Op o);
std::optional<Api> parse_api(const std::string& s);
std::optional<MmioMode> parse_mmio(const std::string& s);
std::optional<ThreadMode> parse_thread_mode(const std::string& s);
std::optional<Op> parse_op(const std::string& s);

struct WorkerConfig {
  Api api = Api::verbs;
  MmioMode mmio = MmioMode::bf_post_mt;  // direct only
  ThreadMode thread_mode = ThreadMode::serialized;
  // direct only: false leaves out the barrier between the WQE and the doorbell record (the
  // "missing udma_to_device_barrier" mutant; emu/sched/visibility.h shows what the device then
  // sees).
  bool dbrec_fence = true;
  // direct only: the register writes as plain stores into the register emudv_init_qp maps (a
  // memcpy into the BlueFlame buffer, an 8-byte store to the doorbell, then a store fence), the way
  // UCX's rc_mlx5 makes them; false: through emudv_bf_copy / emudv_db_write64 / emudv_mmio_flush.
  bool plain_stores = false;
};

// One message. Inline payloads go inside the WQE (length <= Ep::max_inline()); otherwise
// `payload` must lie in memory registered with `lkey` and stay intact until its completion.
struct PostArgs {
  Op op = Op::write;
  const void* payload = nullptr;
  uint32_t length = 0;
  bool inline_data = true;
  uint32_t lkey = 0;
  uint64_t raddr = 0;  // write only
  uint32_t rkey = 0;   // write only
  uint64_t wr_id = 0;  // returned with the completion (direct: kept per WQE index)
};

enum class PostStatus { ok, queue_full, error };

struct Completion {
  uint64_t wr_id = 0;
  bool matched = true;          // direct: the CQE's WQE index is one this endpoint posted at
  int status = IBV_WC_SUCCESS;  // enum ibv_wc_status
  int opcode = 0;               // enum ibv_wc_opcode
  uint32_t wqe_index = 0;       // direct: the CQE's wqe_counter
};

// A lock for the short critical sections around a register write: spins, then yields the CPU
// (a two-core machine runs more posting threads than cores).
class SpinLock {
 public:
  void lock();
  void unlock() { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

class Worker;

class Ep {
 public:
  virtual ~Ep() = default;
  // Posts one signaled WQE. queue_full: no room until completions are polled.
  PostStatus post(const PostArgs& a);
  // Up to max completions. Callers serialize the polls of one endpoint (the library itself locks
  // only in serialized mode).
  int poll(Completion* out, int max);

  virtual uint32_t max_inline() const = 0;
  // The device has taken everything the doorbell record names (or more: a record stored out of
  // order lags behind) and waits on no retry timer (emulated devices; nullopt when the device
  // cannot say).
  virtual std::optional<bool> device_idle() const = 0;
  // The doorbell register this endpoint rings (direct), -1 when not known.
  virtual int register_index() const { return -1; }
  // The last post's error (errno) when post() returned error.
  int last_error() const { return last_error_; }
  ibv_qp* qp() const { return qp_; }

 protected:
  Ep(ibv_qp* qp, std::mutex* worker_lock) : qp_(qp), worker_lock_(worker_lock) {}
  virtual PostStatus post_unlocked(const PostArgs& a) = 0;
  virtual int poll_unlocked(Completion* out, int max) = 0;

  ibv_qp* qp_;
  std::mutex* worker_lock_;  // null in single mode
  int last_error_ = 0;
};

class Worker {
 public:
  // Fails (null, reason in *err) when api = direct and the emulator's provider is not loaded.
  static std::unique_ptr<Worker> create(ibv_context* ctx, const WorkerConfig& cfg,
                                        std::string* err);
  ~Worker();
  // Wraps a QP (RTS, or to be moved there before posting) whose sends complete into send_cq.
  // Fails (null, reason in *err) for direct on a QP or CQ that is not an emulated one.
  Ep* add_ep(ibv_qp* qp, ibv_cq* send_cq, std::string* err);
  const WorkerConfig& config() const { return cfg_; }

  struct Register;  // a doorbell register shared by QPs (direct)

 private:
  Worker(ibv_context* ctx, const WorkerConfig& cfg);
  Register* register_for(const void* uar_opaque, const void* uar);

  ibv_context* ctx_;
  WorkerConfig cfg_;
  std::mutex lock_;  // the worker lock (serialized mode)
  std::mutex setup_mu_;
  std::vector<std::unique_ptr<Register>> regs_;
  std::vector<std::unique_ptr<Ep>> eps_;
};

}  // namespace uctlite
