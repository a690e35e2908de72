#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# The soft-RoCE VM's command runner, inside the host's root (init chroots here). Makes rxe0 on a
# dummy netdev that reaches nothing, then runs each command of the io directory (cmd.N) with its
# own timeout, output in out.N and exit status in rc.N. "@@rxevm" lines are for rxe_vm.py.
io=$1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp
# The dummy module makes dummy0 itself (numdummies=1); add it only where it did not.
{ ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy; } &&
  ip addr add 192.0.2.1/24 dev dummy0 && ip link set dummy0 up &&
  rdma link add rxe0 type rxe netdev dummy0
if ! ibv_devices | grep -qw rxe0; then
  echo "@@rxevm fail rxe0 did not appear: $(rdma link 2>&1 | head -3)"
  exit 0
fi
echo "@@rxevm ready uptime=$(cut -d' ' -f1 /proc/uptime)"
# shellcheck disable=SC1091
. "$io/env"
[ -z "$EMU_SHM_DIR" ] || mkdir -p "$EMU_SHM_DIR"
for ((i = 0; ; i++)); do
  [ -f "$io/cmd.$i" ] || break
  echo "@@rxevm begin $i"
  (cd "$(cat "$io/cwd")" && timeout -k 5 "$RXEVM_COMMAND_TIMEOUT" bash "$io/cmd.$i") \
    >"$io/out.$i" 2>&1 </dev/null
  rc=$?
  echo "$rc" >"$io/rc.$i"
  echo "@@rxevm end $i rc=$rc"
done
