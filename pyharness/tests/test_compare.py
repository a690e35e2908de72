# SPDX-License-Identifier: BSD-2-Clause
"""Comparable runs: the XRC lifetime scenarios recorded under `kernel` and under `xrcd` differ in
exactly the rows of docs/design/xrc.md where the two policies disagree, and two runs under one
policy do
not differ at all."""
import os
import subprocess
import sys

import pytest

from rdmaemu.compare import differences, load

pytestmark = pytest.mark.emu_only

HERE = os.path.dirname(os.path.abspath(__file__))
# docs/design/xrc.md's rows where kernel and 2a disagree, as the lifetime tests name them.
DISAGREE = {
    "test_creator_goes_with_no_other_handle[exit]",
    "test_creator_goes_with_no_other_handle[kill]",
    "test_handle_destroyed_while_another_holds",
    "test_last_open_of_domain_goes[close]",
    "test_last_open_of_domain_goes[exit]",
    "test_last_open_of_domain_goes[kill]",
}


def record(run_dir, policy):
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "0",
           f"--xrc-policy={policy}", f"--record={run_dir}",
           os.path.join(HERE, "test_xrc_lifetime.py")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return load(run_dir)


def test_kernel_and_xrcd_differ_exactly_where_the_table_says(tmp_path):
    kernel = record(str(tmp_path / "kernel"), "kernel")
    kernel_again = record(str(tmp_path / "kernel2"), "kernel")
    xrcd = record(str(tmp_path / "xrcd"), "xrcd")
    assert len(kernel) == len(xrcd) >= 14
    assert differences(kernel, kernel_again) == {}
    assert set(differences(kernel, xrcd)) == DISAGREE


def test_compare_command_prints_the_differences(tmp_path):
    from rdmaemu.compare import write_stream
    write_stream(str(tmp_path / "a"), "s", [{"step": "open_qp", "errno": 0}])
    write_stream(str(tmp_path / "b"), "s", [{"step": "open_qp", "errno": 22}])
    p = subprocess.run([sys.executable, "-m", "rdmaemu.compare", str(tmp_path / "a"),
                        str(tmp_path / "b")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "s: record 0" in p.stdout and "1 of 1" in p.stdout
