// SPDX-License-Identifier: BSD-2-Clause
/* bench/mpi_pingpong: MPI latency and bandwidth between two ranks, every message data-checked, for
 * bench/sizes.sh (Open MPI's UCX PML over emu0 against the same program over shared memory).
 * Latency: a ping-pong of 8 B, each round trip timed; the one-way median, average and p99.
 * Bandwidth: windows of 64 non-blocking sends of 64 KiB, each window closed by a 1-byte answer.
 * Each message carries its sequence number in its first and last 8 bytes, checked on arrival.
 * Usage: mpirun -np 2 [emu-run] mpi_pingpong [LAT_ROUND_TRIPS=20000] [BW_WINDOWS=200]
 * Rank 0 prints the figures and "PASS mpi_pingpong <n> messages checked"; a mismatch aborts. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kLatSize = 8, kBwSize = 65536, kWindow = 64 };

static void stamp(unsigned char* buf, size_t len, uint64_t seq) {
  memcpy(buf, &seq, sizeof seq);
  memcpy(buf + len - sizeof seq, &seq, sizeof seq);
}

static void expect(const unsigned char* buf, size_t len, uint64_t seq) {
  uint64_t head, tail;
  memcpy(&head, buf, sizeof head);
  memcpy(&tail, buf + len - sizeof tail, sizeof tail);
  if (head != seq || tail != seq) {
    fprintf(stderr, "FAIL mpi_pingpong: message %llu of %zu bytes carries %llu / %llu\n",
            (unsigned long long)seq, len, (unsigned long long)head, (unsigned long long)tail);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* One-way latency of 8 B; returns the number of messages checked by this rank. */
static long latency(int rank, int trips) {
  unsigned char buf[kLatSize];
  double* rtt = malloc(sizeof(double) * (size_t)trips);
  const int warmup = trips / 10;
  if (!rtt) MPI_Abort(MPI_COMM_WORLD, 2);
  for (int i = -warmup; i < trips; ++i) {
    const uint64_t seq = (uint64_t)(i + warmup);
    const double t0 = MPI_Wtime();
    if (rank == 0) {
      stamp(buf, kLatSize, seq);
      MPI_Send(buf, kLatSize, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
      MPI_Recv(buf, kLatSize, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf, kLatSize, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      expect(buf, kLatSize, seq);
      MPI_Send(buf, kLatSize, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    }
    if (rank == 0) expect(buf, kLatSize, seq);
    if (i >= 0) rtt[i] = MPI_Wtime() - t0;
  }
  if (rank == 0) {
    double sum = 0;
    for (int i = 0; i < trips; ++i) sum += rtt[i];
    qsort(rtt, (size_t)trips, sizeof *rtt, by_value);
    printf(
        "mpi_pingpong lat %d B: median %.3f us, avg %.3f us, p99 %.3f us (one way, %d round "
        "trips)\n",
        kLatSize, 0.5e6 * rtt[trips / 2], 0.5e6 * sum / trips, 0.5e6 * rtt[trips * 99 / 100],
        trips);
  }
  free(rtt);
  return warmup + trips;
}

/* Streaming bandwidth of 64 KiB messages from rank 0 to rank 1. */
static long bandwidth(int rank, int windows) {
  unsigned char* buf = malloc((size_t)kBwSize * kWindow);
  MPI_Request req[kWindow];
  unsigned char ack = 0;
  if (!buf) MPI_Abort(MPI_COMM_WORLD, 2);
  memset(buf, 0, (size_t)kBwSize * kWindow);
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int w = 0; w < windows; ++w) {
    for (int i = 0; i < kWindow; ++i) {
      unsigned char* m = buf + (size_t)i * kBwSize;
      const uint64_t seq = (uint64_t)w * kWindow + (uint64_t)i;
      if (rank == 0) {
        stamp(m, kBwSize, seq);
        MPI_Isend(m, kBwSize, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req[i]);
      } else {
        MPI_Irecv(m, kBwSize, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &req[i]);
      }
    }
    MPI_Waitall(kWindow, req, MPI_STATUSES_IGNORE);
    if (rank == 1) {
      for (int i = 0; i < kWindow; ++i)
        expect(buf + (size_t)i * kBwSize, kBwSize, (uint64_t)w * kWindow + (uint64_t)i);
      MPI_Send(&ack, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
    } else {
      MPI_Recv(&ack, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
  }
  const double t = MPI_Wtime() - t0;
  if (rank == 0)
    printf("mpi_pingpong bw %d B: %.1f MB/s (%d windows of %d)\n", kBwSize,
           1e-6 * kBwSize * (double)kWindow * windows / t, windows, kWindow);
  free(buf);
  return rank == 1 ? (long)windows * kWindow : 0;
}

/* This process's rank, after checking that the job has exactly two. */
static int rank_of_two(void) {
  int rank = 0, ranks = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (ranks == 2) return rank;
  if (rank == 0) fprintf(stderr, "FAIL mpi_pingpong: %d ranks, not 2\n", ranks);
  MPI_Abort(MPI_COMM_WORLD, 2);
  return -1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int rank = rank_of_two();
  const int trips = argc > 1 ? atoi(argv[1]) : 20000;
  const int windows = argc > 2 ? atoi(argv[2]) : 200;
  if (trips < 1 || windows < 1) MPI_Abort(MPI_COMM_WORLD, 2);
  long checked = latency(rank, trips) + bandwidth(rank, windows), total = 0;
  MPI_Reduce(&checked, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("PASS mpi_pingpong %ld messages checked\n", total);
  MPI_Finalize();
  return 0;
}
