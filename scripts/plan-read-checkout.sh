#!/usr/bin/env bash
# Did the installed plan read the checkout? Fails when the plan's own output
# (its stdout) names a path under the checkout; what went to stderr (Python's
# and Ansible's warnings, which may name a module of the checkout's .venv) is
# shown, never failed on. Run by scripts/collection-install-test.sh;
# tests/unit/scripts/test_plan_read_checkout.py tries both sides.
#   plan-read-checkout.sh CHECKOUT STDOUT_FILE STDERR_FILE
set -euo pipefail
root=$1 out=$2 err=$3
if grep -qF "$root" "$out"; then
  echo "FAIL: the plan read the checkout:" >&2
  grep -F "$root" "$out" >&2
  exit 1
fi
if [ -s "$err" ]; then
  echo "the plan's stderr (warnings, not failed on):"
  sed 's/^/  /' "$err"
fi
