#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark (not a test): the cost of one MMIO exit, a store into a trapped register page
# (docs/design/doorbells-and-mmio.md, "Plain stores"), against the same store into plain memory:
# an 8-byte MOV (decoded, one signal), a 16-byte SSE store (single-stepped, two signals) and a
# 64-byte memcpy (glibc's stores), beside two anchors measured in the same run: a system call
# (getppid) and a signal's round trip (raise of a no-op handler). One thread; the median of
# ROUNDS runs, in ns per store.
# Usage: bench/mmio_exit.sh [ROUNDS=5]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
source bench/lib.sh
out=$(for _ in $(seq "$rounds"); do build/bin/mmio-exit; done)
echo "| store | ns per store (median of $rounds) |"
echo "|---|---|"
for form in anchor_syscall anchor_signal plain_store8 exit_store8 plain_store16 exit_store16 exit_memcpy64; do
  echo "| $form | $(awk -v f="$form" '$1 == f {print $2}' <<<"$out" | median) |"
done
