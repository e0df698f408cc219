#!/usr/bin/env bash
# Build the lab image: Debian 12 with systemd as PID 1, made locally with
# mmdebstrap (no image registry is reachable). Skips the build when the image
# exists unless FORCE=1.
#
# The Debian mirror is read from this machine's own apt sources at run time
# (no mirror host is written into the repository).
set -euo pipefail
image=${LAB_IMAGE:-vllm-fleet/debian12-systemd:latest}
here=$(cd "$(dirname "$0")" && pwd)

if [ "${FORCE:-0}" != 1 ] && docker image inspect "$image" >/dev/null 2>&1; then
  echo "lab: image $image present"
  exit 0
fi
if ! command -v mmdebstrap >/dev/null 2>&1; then
  echo "lab: installing mmdebstrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
fi

mirror=$(python3 "$here/apt_mirror.py")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "lab: mmdebstrap bookworm from $mirror"
# Keep the apt lists: a real host has them, and apt works in the lab at once.
# mmdebstrap expands "$1" in its hooks itself (the chroot), not this shell.
# shellcheck disable=SC2016
mmdebstrap --quiet --variant=minbase --skip=cleanup/apt/lists \
  --include=systemd,systemd-sysv,dbus,python3,python3-apt,python3-venv,sudo,iproute2,procps,ca-certificates,curl \
  --customize-hook='chroot "$1" systemctl mask getty.target systemd-logind.service apt-daily.timer apt-daily-upgrade.timer systemd-timesyncd.service e2scrub_reap.service' \
  --customize-hook='truncate -s 0 "$1/etc/machine-id"' \
  bookworm "$work/rootfs.tar" \
  "deb $mirror bookworm main" "deb $mirror bookworm-updates main"
docker import "$work/rootfs.tar" "$image-base" >/dev/null
cat >"$work/Dockerfile" <<DOCKERFILE
FROM $image-base
STOPSIGNAL SIGRTMIN+3
CMD ["/lib/systemd/systemd"]
DOCKERFILE
docker build -q -t "$image" "$work" >/dev/null
docker rmi "$image-base" >/dev/null 2>&1 || true
echo "lab: built $image"
