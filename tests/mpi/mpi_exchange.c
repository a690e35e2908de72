// SPDX-License-Identifier: BSD-2-Clause
/* accept.mpi_exchange: two MPI ranks exchange messages of growing size over Open MPI's UCX PML
 * (emu0 underneath) and check every byte they receive. Each byte depends on the sender, the round
 * and its offset, so a message delivered to the wrong buffer, twice, short or stale fails. Sizes
 * cross UCX's protocol switches: short and buffered copies, eager zero-copy, rendezvous (RDMA
 * READ/WRITE from the registered buffer). Prints "PASS mpi_exchange <bytes> bytes checked" on
 * rank 0 and exits 0; any mismatch is reported with its offset and aborts the job. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned char pattern(int sender, int round, size_t offset) {
  return (unsigned char)(sender * 131 + round * 31 + offset * 7 + (offset >> 8));
}

static void fill(unsigned char* buf, size_t len, int sender, int round) {
  for (size_t i = 0; i < len; ++i) buf[i] = pattern(sender, round, i);
}

static int check(const unsigned char* buf, size_t len, int sender, int round, int self) {
  for (size_t i = 0; i < len; ++i) {
    if (buf[i] != pattern(sender, round, i)) {
      fprintf(stderr,
              "FAIL rank %d: round %d, %zu bytes from rank %d: byte %zu is 0x%02x, not 0x%02x\n",
              self, round, len, sender, i, buf[i], pattern(sender, round, i));
      return 0;
    }
  }
  return 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) fprintf(stderr, "FAIL mpi_exchange needs 2 ranks, has %d\n", size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int peer = 1 - rank;
  const size_t sizes[] = {1, 8, 64, 1000, 4096, 65536, 262144, 1 << 22};
  const int rounds = 20;
  unsigned char* out = malloc(1 << 22);
  unsigned char* in = malloc(1 << 22);
  if (!out || !in) MPI_Abort(MPI_COMM_WORLD, 2);
  unsigned long long checked = 0;
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
    const size_t len = sizes[s];
    for (int r = 0; r < rounds; ++r) {
      const int round = (int)s * rounds + r;
      /* Both directions at once (Sendrecv), then a ping-pong where rank 0 speaks first. */
      fill(out, len, rank, round);
      MPI_Sendrecv(out, (int)len, MPI_BYTE, peer, round, in, (int)len, MPI_BYTE, peer, round,
                   MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (!check(in, len, peer, round, rank)) MPI_Abort(MPI_COMM_WORLD, 1);
      checked += len;
      fill(out, len, rank, round + 1000);
      if (rank == 0) {
        MPI_Send(out, (int)len, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
        MPI_Recv(in, (int)len, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(in, (int)len, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(out, (int)len, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
      }
      if (!check(in, len, peer, round + 1000, rank)) MPI_Abort(MPI_COMM_WORLD, 1);
      checked += len;
    }
  }
  /* Every rank's count, so rank 0 reports what both checked. */
  unsigned long long total = 0;
  MPI_Reduce(&checked, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("PASS mpi_exchange %llu bytes checked\n", total);
  free(out);
  free(in);
  MPI_Finalize();
  return 0;
}
