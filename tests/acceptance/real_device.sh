#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# A real RDMA device (rxe, mlx5), where the machine has one, stays listed and usable beside emu0.
# Exit 77 (skip, with the reason) where there is none: this test never stands in for an emu0 test.
emu_run=$1
real=$(ibv_devices 2>&1)
names=$(echo "$real" | awk 'NR>2 && $1 != "" {print $1}')
if [ -z "$names" ]; then
  echo "SKIP: no real RDMA device on this machine (ibv_devices says: $(echo "$real" | head -1))"
  exit 77
fi
both=$("$emu_run" ibv_devices) || { echo "FAIL: ibv_devices under emu-run failed"; exit 1; }
echo "$both"
for n in $names emu0; do
  echo "$both" | grep -qw "$n" || { echo "FAIL: $n missing from the list under emu-run"; exit 1; }
done
first=$(echo "$names" | head -1)
"$emu_run" ibv_devinfo -d "$first" | grep -q "hca_id:.*$first" || { echo "FAIL: $first not usable"; exit 1; }
echo "PASS: $names listed and usable beside emu0"
