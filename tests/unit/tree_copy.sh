# SPDX-License-Identifier: BSD-2-Clause
# shellcheck shell=bash
# Sourced (not run) by the tests of a ci/ script that plant a violation in a copy of the tree
# (check_function_size.sh, check_layering.sh): a scratch folder, removed at exit, that holds the
# copy; the script's run on it, expected to pass or to fail saying what it found.
# Usage: copies_of SOURCE_DIR FOLDER...; then copy, run_on_copy, fail, expect_pass, expect_fail.

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
copied=()
out=

# copies_of SOURCE_DIR FOLDER...: the folders copy copies.
copies_of() {
  local from=$1
  shift
  copied=("${@/#/$from/}")
}
# A fresh copy in $tmp/tree (not a git work tree: the scripts check every file there).
copy() {
  rm -rf "$tmp/tree" && mkdir -p "$tmp/tree"
  cp -r "${copied[@]}" "$tmp/tree/"
}
# run_on_copy SCRIPT: SCRIPT's status on the copy; its output in $out.
run_on_copy() {
  out=$(bash "$1" "$tmp/tree" 2>&1)
}
# fail WHAT: the test fails, saying WHAT and the output of the last run.
fail() {
  echo "FAIL $1:" && echo "$out" && exit 1
}
# expect_pass WHAT SCRIPT: SCRIPT passes on the copy (WHAT: what the copy is).
expect_pass() {
  run_on_copy "$2" || fail "$1 failed"
  echo "ok   $1 passes"
}
# expect_fail NAME SCRIPT TEXT...: SCRIPT fails on the copy and says each TEXT.
expect_fail() {
  local name=$1 run=$2
  shift 2
  if run_on_copy "$run"; then fail "$name: $(basename "$run") passed"; fi
  local text
  for text in "$@"; do
    grep -qF -- "$text" <<<"$out" || fail "$name: the output does not say '$text'"
  done
  echo "ok   $name"
}
