#!/bin/bash
# Runs a hardware test where there is hardware: on this machine's own RDMA device when it has one,
# else on soft-RoCE (rxe0) in the VM of ci/rxe-vm (docs/comparison.md), else skips (exit 77) with
# the reason for both. usage: real_or_vm.sh RXE_VM_PY COMMAND [ARG...]
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
[ $rc -eq 0 ] || { echo "$check"; exit $rc; }
echo "no real RDMA device on this machine: running on rxe0 in the VM ($check)"
exec python3 "$rxe_vm" -- "$(printf '%q ' "$@")"
