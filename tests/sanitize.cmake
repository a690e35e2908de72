# SPDX-License-Identifier: BSD-2-Clause
# ---- the sanitizer subset (EMU_SANITIZE builds only; ci/sanitize.sh, README "Sanitizers"),
# besides the unit tests. ----

# The verbs tests a sanitizer run takes, in a binary of their own, so that a sanitizer build
# compiles these rather than emu_verbs_tests' two dozen: two processes of the project's own binary
# over one segment (and emu-ctl's census after a fork), registered memory shared between them,
# SRQs (XRC SRQs included), UD, and the thread modes (threads posting to one QP or to QPs of a
# thread domain); plain and with the engine on a thread.
add_executable(emu_san_verbs_tests verbs/test_cross_process.cpp verbs/test_fork.cpp
               verbs/test_shared_mr.cpp verbs/test_srq.cpp verbs/test_xrc_rdma.cpp
               verbs/test_ud.cpp verbs/test_thread_modes.cpp)
target_link_libraries(emu_san_verbs_tests PRIVATE emu_test_support)
target_compile_definitions(emu_san_verbs_tests PRIVATE EMU_CTL="$<TARGET_FILE:emu-ctl>")
add_dependencies(emu_san_verbs_tests emu-ctl)
emu_test_variants(emu_san_verbs_tests VARIANTS san_verbs EMU_FABRIC=san-verbs
                  san_verbs_thread EMU_ENGINE=thread)

# Unmodified Debian programs between two processes with the instrumented provider preloaded behind
# the sanitizer's runtime (emu-run puts it first; the programs are not instrumented); label
# sanitize.
# A report prints one of these; the process must also exit 0 (pair.py checks both).
set(san_absent --absent "ERROR: AddressSanitizer" --absent "runtime error:"
               --absent "WARNING: ThreadSanitizer" --absent "ERROR: LeakSanitizer")
# LeakSanitizer is off in the Debian programs: their own leaks are not the provider's, and a
# suppression cannot tell the two apart (every provider frame sits under libibverbs' and theirs).
set(san_debian_asan detect_leaks=0:verify_asan_link_order=0)
# san_pair_test(<name> <port> <program and its options> [pair.py options]): <program> as server
# and as the client of localhost, on port <port>.
function(san_pair_test name port program)
  set(cmd "${program} -p ${port}")
  add_test(NAME san.${name} COMMAND ${PAIR} --name san_${name} --port ${port} ${ARGN}
           --env ASAN_OPTIONS=${san_debian_asan} --server "${cmd}" --client "${cmd} localhost"
           --expect-server "iters in" --expect "iters in" ${san_absent})
  set_tests_properties(san.${name} PROPERTIES LABELS sanitize TIMEOUT 600)
endfunction()
san_pair_test(rc_pingpong 19601 "ibv_rc_pingpong -d emu0 -c -n 200")
san_pair_test(rc_pingpong_events 19602 "ibv_rc_pingpong -d emu0 -c -n 200 -e")
# The device engine on a thread of its own beside the program's: the provider's sharing between
# threads, what TSan is for.
san_pair_test(rc_pingpong_engine_thread 19603 "ibv_rc_pingpong -d emu0 -c -n 200" --env EMU_ENGINE=thread)
san_pair_test(ud_pingpong 19604 "ibv_ud_pingpong -d emu0 -c -n 200")
san_pair_test(srq_pingpong 19605 "ibv_srq_pingpong -d emu0 -c -n 200")
