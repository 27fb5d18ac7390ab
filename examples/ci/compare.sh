#!/usr/bin/env bash
# A pull request's head against its base, paired on one machine, failing on a regression:
#   examples/ci/compare.sh BASE_PYTHON HEAD_PYTHON [OVERRIDES...]
# BASE_PYTHON and HEAD_PYTHON are the interpreters of two environments that differ in what the PR changes (your
# package at the base and at the head commit, or a framework's two versions). Each cell's two variants take turns in
# bursts of warm workers (nnbench ab runtime.python=BASE,HEAD); the exit code is 1 where a cell is slower at the
# head, naming it. The Markdown report (changed cells only, each with the command that measures it again) goes to
# $GITHUB_STEP_SUMMARY (elsewhere to nnbench-ab.md, and standard output), the verdicts' JSON (schema
# nnbench.paired/1) to nnbench-ab.json.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 BASE_PYTHON HEAD_PYTHON [OVERRIDES...], e.g. $0 base/.venv/bin/python head/.venv/bin/python model=lenet" >&2
  exit 2
fi
base=$1 head=$2
shift 2
summary=${GITHUB_STEP_SUMMARY:-nnbench-ab.md}
# nnbench appends its report (a job summary collects several): outside GitHub, start a fresh file on each run
[ -n "${GITHUB_STEP_SUMMARY:-}" ] || rm -f "$summary"
rc=0
nnbench ab "runtime.python='$base','$head'" "$@" --fail-on-regression --markdown "$summary" --json \
  > nnbench-ab.json || rc=$?
[ -n "${GITHUB_STEP_SUMMARY:-}" ] || cat "$summary"
exit "$rc"
