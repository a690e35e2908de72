# SPDX-License-Identifier: BSD-2-Clause
"""pytest -n 2 gives the same results as pytest -n 0: runs the suite both ways (each with its own
junit XML under OUTDIR) and compares every test's outcome. Usage: same_results.py TESTS OUTDIR"""
import os
import subprocess
import sys
import xml.etree.ElementTree as ET


def outcomes(xml_path):
    res = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        name = case.get("classname") + "::" + case.get("name")
        kinds = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
        res[name] = kinds[0] if kinds else "passed"
    return res


def run(tests, outdir, workers):
    xml = os.path.join(outdir, f"n{workers}.xml")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", str(workers),
           f"--junitxml={xml}", f"--basetemp={os.path.join(outdir, f'tmp-n{workers}')}", tests]
    rc = subprocess.run(cmd, timeout=900).returncode
    return rc, outcomes(xml)


def main():
    tests, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    rc0, serial = run(tests, outdir, 0)
    rc2, spread = run(tests, outdir, 2)
    if serial != spread:
        diff = sorted(k for k in set(serial) | set(spread) if serial.get(k) != spread.get(k))
        sys.exit(f"-n 0 and -n 2 differ: {[(k, serial.get(k), spread.get(k)) for k in diff]}")
    print(f"same results over {len(serial)} tests (exit {rc0} and {rc2})")
    sys.exit(0 if rc0 == rc2 == 0 else 1)


if __name__ == "__main__":
    main()
