#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# The sanitizer subset (README "Sanitizers"): ASan+UBSan with LeakSanitizer, and TSan, over the
# unit tests, the cross-process verbs tests and unmodified Debian programs with the instrumented
# provider preloaded. ci/sanitize.sh [address,undefined|thread]... (both by default). The two
# builds run side by side, each of only the targets the subset runs; any report fails the run.
# SAN_STEPS (default "build run") does only one of the two ("build" or "run").
set -euo pipefail
cd "$(dirname "$0")/.."
kinds=("$@")
# shellcheck disable=SC2054  # the comma is part of the first sanitizer's name
[ ${#kinds[@]} -gt 0 ] || kinds=(address,undefined thread)
bash ci/setup.sh
# The subset's binaries (tests/sanitize.cmake, the fuzz tests of tests/fuzz/ and the XRC, wire and
# injection tests of tests/verbs/; cm_probe, cm_survivor and ucp_sockaddr for the RDMA CM pairs);
# TSan runs fewer.
TARGETS_COMMON=(emu_unit_tests emu_san_verbs_tests emu-run emu_verbs emu-ctl emu_fuzz_verbs
                emu_xrc_tests cm_probe cm_survivor)
TARGETS_ASAN=(emu_fuzz_direct emu_wire_tests emu_inject_tests ucp_sockaddr)
# Each build may use every core: while both run the cores are shared, and the one that ends last
# (ASan's, with more to build) has them all to itself.
jobs=$(nproc)

dir_of() { echo "build-$(echo "$1" | tr ',' '-')"; }

build() {
  local dir; dir=$(dir_of "$1")
  # -O1 and line tables only (-g1): what the sanitizers' reports need (file:line in every frame,
  # inlined ones too), at half the compile time of -O2 -g, which is most of this step's time.
  local flags="-O1 -g1 -DNDEBUG"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMU_WERROR=ON -DEMU_SANITIZE="$1" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" >/dev/null
  local targets=("${TARGETS_COMMON[@]}")
  [ "$1" = thread ] || targets+=("${TARGETS_ASAN[@]}")
  cmake --build "$dir" -j"$jobs" --target "${targets[@]}" >"$dir/build.log" 2>&1 ||
    { tail -50 "$dir/build.log"; return 1; }
}

steps=${SAN_STEPS:-build run}
if [[ " $steps " == *" build "* ]]; then
  pids=()
  for k in "${kinds[@]}"; do build "$k" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p"; done
fi
[[ " $steps " == *" run "* ]] || exit 0

# Every report ends the process with a failure: ASan's and TSan's by default (TSan exits 66 at the
# end), UBSan's only with halt_on_error; the pair scripts also fail a process whose output holds a
# report, whatever its exit code (tests/acceptance/pair.py). LeakSanitizer is on for the project's
# own binaries (unit, verbs, fuzz, XRC, wire tests, emu-ctl); the Debian programs' leaks are
# theirs, so they run with it off (docs/design/sanitizers-and-ci.md, "Sanitizers"). The
# instrumented provider
# is preloaded into uninstrumented programs, hence verify_asan_link_order=0 (the runtime is
# preloaded first, ahead of it).
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
supp=$PWD/ci/lsan.supp
# The project's own binaries: the unit tests (label unit), the verbs tests of emu_san_verbs_tests,
# both fuzzers (the device model directly, and verbs with the engine inline and on a thread), the
# XRC lifetime and kill tests, verbs programs under wire faults and error injection.
own_asan='^(san_verbs|san_verbs_thread|fuzz|fuzz_thread|xrc|wire|inject)\.[A-Z]'
# Under TSan the multi-threaded ones: the engine on a thread of its own beside the program's, and
# the thread-mode tests' posting threads in every variant.
own_tsan='^(san_verbs_thread\.|fuzz_thread\.|xrc_thread\.|san_verbs\.(ThreadMode|ProviderTls))'
# Debian programs between processes with the provider preloaded: the pingpongs of label sanitize,
# every RDMA CM pair (label cm: rdmacm-utils, perftest -R, rsockets, UCX's rdmacm, their error
# paths), and ibv_rc_pingpong under wire faults and injected errors.
debian='^(san\.|cm\.|wire\.rc_pingpong|inject\.rc_pingpong)'
# Left out of each run, with the reason (tests/cm/CMakeLists.txt has the rest): rping's error
# paths exit from two threads at once (its CM thread calls exit() while main returns), which the
# sanitizer runtimes' exit handlers do not survive (docs/design/verbs-provider.md, "Exit"); the
# cm.probe_*
# tests take those paths from one thread instead.
debian_skip='^cm\.(unknown_address|nobody_listening|no_answer|listener_killed_with_pending)$'
run() { ctest --output-on-failure --no-tests=error --timeout 600 -j2 "$@"; }
# Each kind in a subshell of its own: its variables do not reach the next.
for k in "${kinds[@]}"; do (
  dir=$(dir_of "$k")
  skip='^$'
  dskip=$debian_skip
  case "$k" in
    # TSan cannot follow a child that starts threads after a multi-threaded fork (it dies, and
    # die_after_fork=0 may hang): san_verbs_thread runs with EMU_ENGINE=thread
    # (tests/sanitize.cmake), so ForkTest's parent (tests/verbs/test_fork.cpp) has its device
    # thread running when it forks, and the child's first doorbell starts one of its own
    # (ProgressThread::get, emu/device/progress.cpp).
    # That test runs under ASan only (and unsanitized); san_verbs.*ForkTest, one thread at the
    # fork, runs here.
    # Under TSan a posting thread racing the device thread runs about a thousand times slower
    # than plain (sched_yield loops, every atomic a call into the runtime): the fuzzers take the
    # first tenth of their seeds' steps, the XRC kill test 20 of its 200 iterations (FUZZ_PERCENT,
    # tests/fuzz/fuzz_rng.h; EMU_XRC_KILL_ITERATIONS, tests/verbs/test_xrc_kill.cpp). The plain
    # suite and ASan run them whole.
    # UCX under the TSan runtime: its memory hooks do not see munmap (the runtime's interceptors
    # call the system directly), so its registration cache keeps registrations of freed memory
    # and a reused address names the freed pages, as it would on hardware; with UCX registering
    # each buffer instead (UCX_IB_REG_METHODS=direct) both processes crash inside UCX under TSan
    # and pass without it. The UCX pairs run under ASan.
    thread) export TSAN_OPTIONS=halt_on_error=0:second_deadlock_stack=1:suppressions=$PWD/ci/tsan.supp
            export FUZZ_PERCENT=10 EMU_XRC_KILL_ITERATIONS=20
            dskip="${debian_skip%)\$}|ucx_rdmacm_ib|ucx_rdmacm_eth)\$"
            own=$own_tsan
            skip='^san_verbs_thread\..*ForkTest' ;;
    # Under ASan each of the XRC kill test's iterations forks and kills instrumented processes
    # (about 1 s each): 40 of its 200 iterations, the plain suite runs them all.
    *) export ASAN_OPTIONS=detect_leaks=1:verify_asan_link_order=0:abort_on_error=0
       export EMU_XRC_KILL_ITERATIONS=40
       export LSAN_OPTIONS=suppressions=$supp:print_suppressions=0
       own=$own_asan ;;
  esac
  echo "== sanitizer $k"
  cd "$dir"
  run -L unit
  run -R "$own" -E "$skip"
  ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 run -R "$debian" -E "$dskip"
) done
