#!/usr/bin/env bash
# Wait for the lab images that scripts/setup.sh builds in the background
# (VLLM_FLEET_IMAGES_IN_BACKGROUND=1, set by `make test`), print their log and
# exit with their status. Nothing to wait for (a plain `make setup`): exit 0.
set -euo pipefail
cd "$(dirname "$0")/.."
pidfile=.lab/images.pid
[ -f "$pidfile" ] || exit 0
pid=$(cat "$pidfile")
start=$(date +%s)
while kill -0 "$pid" 2>/dev/null; do sleep 2; done
rm -f "$pidfile"
echo "== lab images (built in the background; waited $(( $(date +%s) - start )) s for them)"
cat .lab/images.log
if [ ! -f .lab/images.rc ]; then
  echo "lab images: the background build left no exit status (killed?)" >&2
  exit 1
fi
rc=$(cat .lab/images.rc)
if [ "$rc" != 0 ]; then
  echo "lab images: the background build failed (exit $rc); its log is above" >&2
fi
exit "$rc"
