// SPDX-License-Identifier: BSD-2-Clause
/* Direct access to emulated devices' queues, as infiniband/mlx5dv.h gives it for mlx5: code that
 * builds WQEs, stores doorbell records and rings doorbells by itself (as UCX's rc_mlx5 transport
 * does) gets the rings, doorbell records, the doorbell register and its BlueFlame buffers of an
 * emulated QP and CQ here. The layouts are mlx5's (emu/wqe.h: 64-byte send blocks, CQE64 with the
 * owner bit), the doorbell records big-endian 16-bit counters.
 *
 * MMIO goes through the functions below, never through plain stores to the register: each is what
 * the device receives, recorded with the writing thread, and the flush is when BlueFlame chunks
 * reach it (docs/design/doorbells-and-mmio.md). Exported by libemu_verbs.so (link it, or run under
 * emu-run).
 */
#ifndef EMUDV_H
#define EMUDV_H

#include <infiniband/verbs.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A doorbell register: the 8-byte doorbell and two BlueFlame buffers of bf_size bytes each
 * (the second at bf + bf_size); posts alternate between them. Registers are shared by QPs of a
 * context past EMU_UARS of them (several QPs, one register), except a QP made under a thread
 * domain, which has one of its own. */
struct emudv_uar {
  volatile uint64_t *db;
  void *bf;
  uint32_t bf_size;
  uint32_t index; /* the register's number in its context (race reports name it) */
  void *opaque;   /* the device's handle for this register */
};

struct emudv_qp {
  uint32_t qpn;
  void *sq_buf;        /* send ring: sq_wqe_cnt blocks of sq_stride (64) bytes */
  uint32_t sq_wqe_cnt; /* power of two */
  uint32_t sq_stride;
  void *rq_buf; /* receive ring: rq_wqe_cnt WQEs of rq_stride bytes (data segments) */
  uint32_t rq_wqe_cnt;
  uint32_t rq_stride;
  volatile uint32_t *dbrec; /* [0] receive counter, [1] send counter (big-endian, 16 bits) */
  struct emudv_uar uar;
  uint32_t max_inline; /* bytes of inline data one WQE may carry (as created) */
  void *opaque;
};

struct emudv_cq {
  uint32_t cqn;
  void *buf;                /* cqe_cnt CQE64s. The CQE at consumer index ci is the device's when
                               op_own >> 4 != 15 (invalid) and (op_own & 1) == (ci / cqe_cnt) & 1 */
  uint32_t cqe_cnt;         /* power of two */
  uint32_t cqe_size;        /* 64 */
  volatile uint32_t *dbrec; /* consumer index (host order, 32 bits): store it after polling */
};

/* 0, or EINVAL when the object is not an emulated one; emudv_init_cq: EOPNOTSUPP for a CQ of a
 * device in the mlx5 personality (EMU_PERSONALITY=mlx5), whose CQs mlx5dv_init_obj describes. */
int emudv_init_qp(struct ibv_qp *qp, struct emudv_qp *out);
int emudv_init_cq(struct ibv_cq *cq, struct emudv_cq *out);

/* ---- MMIO, recorded by the device with the calling thread ---- */
/* The 8-byte doorbell: the first 8 bytes of the last WQE's control segment. */
void emudv_db_write64(struct emudv_uar *uar, uint64_t ctrl_head);
/* BlueFlame: copies nblocks 64-byte blocks from src into the buffer at dst (inside uar->bf) in
 * 64-byte write-combining chunks. src blocks are contiguous; the caller splits a WQE that wraps
 * the ring into two calls, as mlx5 drivers do. */
void emudv_bf_copy(struct emudv_uar *uar, void *dst, const void *src, unsigned nblocks);
/* Drains the calling thread's write-combining buffers: the device receives the BlueFlame chunks
 * this thread wrote since its last flush (mmio_flush_writes). */
void emudv_mmio_flush(void);

/* ---- Stores to the send ring and doorbell record, recorded (optional) ----
 * Plain stores work too; these let the device name the threads behind a double write and a
 * doorbell record that runs ahead of the ring. pos is the ring position in blocks (the WQE
 * index of its control segment is pos & 0xffff). */
void emudv_sq_write(struct emudv_qp *qp, uint32_t pos, const void *wqe, unsigned nblocks);
void emudv_sq_dbrec(struct emudv_qp *qp, uint32_t producer); /* the barrier, then the record */
/* The record store without the barrier before it, and the barrier alone (udma_to_device_barrier):
 * a driver that stores WQE, barrier, record with these is emudv_sq_dbrec; one that leaves the
 * barrier out lets the device see the record before the WQE (a weak visibility profile in a
 * scheduled run, emu/sched/visibility.h). */
void emudv_sq_dbrec_unfenced(struct emudv_qp *qp, uint32_t producer);
void emudv_to_device_barrier(void);

/* ---- The device's race log (docs/design/doorbells-and-mmio.md) ---- */
enum emudv_race_kind {
  EMUDV_RACE_BF_TORN = 1,
  EMUDV_RACE_DBREC_BACKWARDS = 2,
  EMUDV_RACE_DBREC_AHEAD = 3,
  EMUDV_RACE_DOUBLE_WRITE = 4,
  EMUDV_RACE_STALE_WQE = 5,
  EMUDV_RACE_OWNER = 6, /* a queue without a lock (thread domain, EMU_SINGLE_THREADED) entered
                           by a second thread while another was inside: writer_tids = {the
                           thread inside, the one entering}; slot = the queue's producer index
                           (16 bits), for an SRQ its number (qpn 0, reg -1) */
  EMUDV_RACE_KINDS = 7,
};

struct emudv_race {
  uint64_t seq;  /* 1-based number in the device's log */
  uint32_t kind; /* enum emudv_race_kind */
  uint32_t device;
  uint32_t qpn;
  int32_t context; /* -1: unknown */
  int32_t reg;     /* register index in the context, -1: none */
  uint32_t slot;   /* WQE index (BlueFlame: the WQE the buffer's first chunk names) */
  int32_t pid;
  uint32_t writer_tids[2];
  uint32_t values[2];    /* kind-specific (doorbell record before/after; buffer and chunk mask;
                            EMUDV_RACE_OWNER: values[0] = the queue, 0 send, 1 receive, 2 SRQ) */
  const char *kind_name; /* "bf_torn", ... */
  const char *executed;  /* what the device did: "executed_bf_copy", "local_qp_op_error", ... */
};

/* Events recorded so far on this fabric (a counter: read it before a run, pass it as `from`). */
uint64_t emudv_races_recorded(void);
/* Copies up to max events numbered >= from (oldest first; the log keeps the last 1024). */
int emudv_read_races(uint64_t from, struct emudv_race *out, int max);

/* The send queue as the device sees it: its consumer position (blocks) and whether the QP waits
 * on a retry timer. For a drain loop: the device has taken everything the doorbell record names
 * when (dbrec - consumed) & 0xffff == 0. */
int emudv_sq_device_state(struct ibv_qp *qp, uint32_t *consumed, int *stalled);

#ifdef __cplusplus
}
#endif
#endif /* EMUDV_H */
