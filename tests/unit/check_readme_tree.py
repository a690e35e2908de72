#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""README.md's tree block against the repository (ctest unit.readme_tree).

The block is the first ``` block after the "## The tree" heading. A line that starts in column 0
names top-level folders; a line indented by two names folders under the last top-level one. The
names are the leading words that end in "/" (the description follows them); lines indented
further are descriptions. A name may hold slashes ("include/emu/"): its first part is the child.

Checks, both ways:
- every folder the block names exists in the tree as git tracks it;
- every tracked top-level folder, and every tracked folder directly under emu/, verbs_provider/,
  stress/, tests/ and tools/, appears in the block.
Exit 0 when both hold, else 1 with a line per folder missing or extra.

Usage: check_readme_tree.py [REPO_ROOT]   (default: the repository this file is in)
"""
import pathlib
import subprocess
import sys

COVERED = ("emu", "verbs_provider", "stress", "tests", "tools")


def tree_block(readme):
    lines = readme.split("\n")
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "## The tree")
        open_ = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
        close = next(i for i in range(open_ + 1, len(lines)) if lines[i].startswith("```"))
    except StopIteration:
        return None
    return lines[open_ + 1:close]


def names_of(text):
    names = []
    for word in text.split():
        if not word.endswith("/"):
            break
        names.append(word.strip("/"))
    return names


def named_folders(block):
    """The folder paths the block names, as (path, line number in the block)."""
    named, parent = [], None
    for n, line in enumerate(block, 1):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:
            tops = names_of(line)
            named += [(t, n) for t in tops]
            parent = tops[-1] if tops else None
        elif indent == 2 and parent:
            named += [(f"{parent}/{c}", n) for c in names_of(line)]
    return named


def tracked_folders(root):
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], check=True,
                         capture_output=True).stdout.decode()
    folders = set()
    for path in filter(None, out.split("\0")):
        parts = path.split("/")[:-1]
        for k in range(1, len(parts) + 1):
            folders.add("/".join(parts[:k]))
    return folders


def main():
    root = (pathlib.Path(sys.argv[1]) if len(sys.argv) > 1
            else pathlib.Path(__file__).resolve().parents[2])
    block = tree_block((root / "README.md").read_text())
    if block is None:
        print("check_readme_tree: README.md has no ``` block under '## The tree'")
        return 1
    named = named_folders(block)
    folders = tracked_folders(root)
    problems = []
    for path, n in named:
        if path not in folders:
            problems.append(f"extra: README.md's tree names {path}/ (line {n} of the block), "
                            "which git does not track")
    listed = {path for path, _ in named}
    listed_children = {"/".join(p.split("/")[:2]) for p in listed}
    wanted = {f for f in folders if "/" not in f}
    wanted |= {f for f in folders if f.count("/") == 1 and f.split("/")[0] in COVERED}
    for f in sorted(wanted):
        if f not in listed and f not in listed_children:
            problems.append(f"missing: {f}/ is tracked by git but not in README.md's tree")
    for p in problems:
        print(f"check_readme_tree: {p}")
    if problems:
        return 1
    print(f"check_readme_tree: {len(named)} folders named, all tracked; "
          f"{len(wanted)} required folders all listed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
