#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark-length campaign (not a test): the RC sweeps of tests/verbs/test_wire_faults.cpp over
# many seeds — every signaled WR completes exactly once with the right data, or the QP fails
# with RETRY_EXC_ERR and flushes the rest — on a fabric of its own, removed afterwards.
# Usage: bench/wire_sweep.sh [seeds=200]
set -euo pipefail
cd "$(dirname "$0")/.."
export EMU_FABRIC=wire-sweep-$$ WIRE_SWEEP_SEEDS=${1:-200}
trap 'rm -f "${EMU_SHM_DIR:-/dev/shm}/rdmaemu-$(id -u)-$EMU_FABRIC"' EXIT
timeout 3600 build/bin/emu-run build/tests/verbs/emu_wire_tests --gtest_filter='*RcSweep*'
