#!/usr/bin/env bash
# Make sure a Docker daemon answers. Installs Debian's docker.io when no
# daemon binary exists and starts dockerd in the background (no systemd on
# these machines). Idempotent: returns at once when `docker info` works.
set -euo pipefail
log=${DOCKERD_LOG:-/var/log/vllm-fleet-dockerd.log}

if docker info >/dev/null 2>&1; then
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "lab: installing docker.io (Debian package)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null
fi
if ! command -v docker >/dev/null 2>&1; then
  echo "lab: no docker CLI after install" >&2
  exit 1
fi
echo "lab: starting dockerd (log: $log)"
nohup dockerd >"$log" 2>&1 &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    exit 0
  fi
  sleep 0.5
done
echo "lab: dockerd did not answer within 30 s; last log lines:" >&2
tail -n 20 "$log" >&2
exit 1
