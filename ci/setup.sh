#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Installs what the build and the tests need, from Debian 12's repositories, if it is missing.
# Works from a bare debian:12 (no compiler, no cmake) as root, non-interactively.
set -euo pipefail
PKGS=(build-essential cmake g++ python3 procps
      libibverbs-dev ibverbs-utils perftest ucx-utils openmpi-bin libopenmpi-dev
      librdmacm-dev rdmacm-utils libucx-dev
      pkg-config libnl-3-dev libnl-route-3-dev
      googletest libgtest-dev clang-format clang-tidy shellcheck python3-pyflakes universal-ctags
      # the tools' command lines and JSON (header-only)
      libcli11-dev nlohmann-json3-dev
      python3-pyverbs python3-dev pybind11-dev python3-pytest python3-pytest-xdist
      # the soft-RoCE VM (ci/rxe-vm; its kernel is fetched, never installed)
      qemu-system-x86 busybox-static kmod iproute2 ibverbs-providers
      # reads the wire captures (EMU_PCAP)
      tshark
      # the Slurm campaign test's one-node cluster (docs/guides/campaigns.md)
      slurm-wlm munge)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "ci/setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
