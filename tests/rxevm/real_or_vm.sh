#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Runs a hardware test where there is hardware: on this machine's own RDMA device when it has one,
# else on soft-RoCE (rxe0) in the VM of ci/rxe-vm (docs/guides/comparison.md). Where neither can
# run it
# fails with the reason for both, or skips (exit 77) where EMU_RXEVM_OPTIONAL=1 allows it.
# usage: real_or_vm.sh RXE_VM_PY COMMAND [ARG...]
rxe_vm=$1
shift
if ibv_devices 2>/dev/null | awk 'NR > 2 && $1 != ""' | grep -q .; then
  exec "$@"
fi
check=$(python3 "$rxe_vm" --check)
rc=$?
if [ $rc -eq 77 ]; then
  echo "SKIP: no real RDMA device on this machine, and no VM: ${check#rxe-vm: }"
  exit 77
fi
if [ $rc -ne 0 ]; then
  echo "$check"
  echo "FAIL: no real RDMA device on this machine, and the VM cannot run"
  exit $rc
fi
echo "no real RDMA device on this machine: running on rxe0 in the VM ($check)"
exec python3 "$rxe_vm" -- "$(printf '%q ' "$@")"
