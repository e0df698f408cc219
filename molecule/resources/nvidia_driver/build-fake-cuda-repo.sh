#!/usr/bin/env bash
# Build a signed, flat apt repository of FAKE packages named like NVIDIA's
# (cuda-keyring, nvidia-open, cuda-drivers, nvidia-kernel-open-dkms, ...) for
# the nvidia_driver Molecule scenarios. No driver is inside: each package holds
# a marker file; nvidia-persistenced holds a stand-in daemon and unit;
# nvidia-driver-cuda holds a stand-in nvidia-smi of its own version, which
# answers from the captures in /opt/gpu-fixture only when the "loaded kernel
# module" (/opt/gpu-fixture/proc-driver-nvidia-version.txt) is that version, and
# otherwise fails as the real one does (version mismatch, no driver).
# Usage: build-fake-cuda-repo.sh OUT_DIR [REPO_URL_IN_TARGET]
# Writes OUT_DIR/debian12/x86_64/{*.deb,Packages,Release,InRelease} and
# OUT_DIR/keyring.sha256 (the cuda-keyring .deb's sha256, for the role's pin);
# and OUT_DIR/later/debian12/x86_64: the same repository, signed by the same key,
# after NVIDIA published a newer 580 release (580.105.08-1) and cuda-keyring 1.2-1
# (what tempts an `apt-get upgrade` once the role has installed the driver).
set -euo pipefail
out=$1
url=${2:-file:/srv/fake-cuda/debian12/x86_64/}
repo=$out/debian12/x86_64
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out"; mkdir -p "$repo"

export GNUPGHOME=$work/gnupg
mkdir -m 700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-gen-key 'vllm-fleet FAKE CUDA repository <lab@invalid>' ed25519 sign never
gpg --batch --export > "$work/cuda-archive-keyring.gpg"

# pkg NAME VERSION ARCH DEPENDS [extra-setup-function]
pkg() {
  local name=$1 version=$2 arch=$3 depends=$4 setup=${5:-} repo=${REPO_DIR:-$repo}
  local d=$work/pkg/$name-$version
  mkdir -p "$d/DEBIAN" "$d/usr/share/doc/$name"
  echo "FAKE $name $version for vllm-fleet tests: no NVIDIA software inside." > "$d/usr/share/doc/$name/FAKE"
  {
    echo "Package: $name"
    echo "Version: $version"
    echo "Architecture: $arch"
    echo "Maintainer: vllm-fleet lab <lab@invalid>"
    [ -n "$depends" ] && echo "Depends: $depends"
    echo "Description: FAKE $name for vllm-fleet tests (no driver inside)"
  } > "$d/DEBIAN/control"
  [ -n "$setup" ] && "$setup" "$d" "$version"
  dpkg-deb --root-owner-group -Zxz --build "$d" "$repo/${name}_${version}_${arch}.deb" >/dev/null
}

keyring_files() {
  mkdir -p "$1/usr/share/keyrings" "$1/etc/apt/sources.list.d"
  cp "$work/cuda-archive-keyring.gpg" "$1/usr/share/keyrings/cuda-archive-keyring.gpg"
  echo "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] $url /" \
    > "$1/etc/apt/sources.list.d/cuda-debian12-x86_64.list"
}

persistenced_files() {
  mkdir -p "$1/usr/bin" "$1/lib/systemd/system"
  cat > "$1/usr/bin/nvidia-persistenced" <<'SH'
#!/bin/sh
# FAKE nvidia-persistenced: records its arguments, forks a sleeper like the real daemon forks.
mkdir -p /run/nvidia-persistenced
echo "$*" > /run/nvidia-persistenced/args
setsid sleep infinity </dev/null >/dev/null 2>&1 &
exit 0
SH
  chmod 755 "$1/usr/bin/nvidia-persistenced"
  cat > "$1/lib/systemd/system/nvidia-persistenced.service" <<'UNIT'
[Unit]
Description=NVIDIA Persistence Daemon (FAKE, vllm-fleet tests)

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
ExecStopPost=/bin/rm -rf /run/nvidia-persistenced

[Install]
WantedBy=multi-user.target
UNIT
}

nvidia_smi_files() {
  local upstream=${2%-*}
  mkdir -p "$1/usr/bin"
  cat > "$1/usr/bin/nvidia-smi" <<SH
#!/bin/sh
# FAKE nvidia-smi of userspace $upstream (vllm-fleet tests, no driver inside).
ver=$upstream
fx=/opt/gpu-fixture
loaded=\$(awk '/Kernel Module/ { for (i = 1; i <= NF; i++) if (\$i ~ /^[0-9]+\.[0-9]+(\.[0-9]+)?\$/) { print \$i; exit } }' "\$fx/proc-driver-nvidia-version.txt" 2>/dev/null)
if [ -z "\$loaded" ]; then
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
  exit 9
fi
if [ "\$loaded" != "\$ver" ]; then
  echo "Failed to initialize NVML: Driver/library version mismatch"
  echo "NVML library version: \${ver%.*}"
  exit 18
fi
case "\$*" in
  "--query-gpu=index,pci.bus_id,pcie"*) f=nvidia-smi-query-fabric.csv ;;
  "--query-gpu="*) f=nvidia-smi-query-gpu.csv ;;
  "-q -x") f=nvidia-smi-q.xml ;;
  "topo -m") f=nvidia-smi-topo-m.txt ;;
  "topo -p2p r") f=nvidia-smi-topo-p2p-r.txt ;;
  "--query-compute-apps="*) f=nvidia-smi-query-compute-apps.csv ;;
  *) echo "FAKE nvidia-smi: no capture for: \$*" >&2; exit 2 ;;
esac
[ -f "\$fx/\$f" ] || { echo "FAKE nvidia-smi: no \$fx/\$f" >&2; exit 2; }
exec cat "\$fx/\$f"
SH
  chmod 755 "$1/usr/bin/nvidia-smi"
}

driver_release() {
  local v=$1
  pkg nvidia-kernel-open-dkms "$v" amd64 ""
  pkg nvidia-kernel-dkms "$v" amd64 ""
  pkg libcuda1 "$v" amd64 ""
  pkg libnvidia-ml1 "$v" amd64 ""
  pkg nvidia-driver-cuda "$v" amd64 "libcuda1 (= $v), libnvidia-ml1 (= $v)" nvidia_smi_files
  pkg nvidia-persistenced "$v" amd64 "" persistenced_files
  pkg nvidia-open "$v" amd64 "nvidia-kernel-open-dkms (= $v), nvidia-driver-cuda (= $v), nvidia-persistenced (= $v)"
  pkg cuda-drivers "$v" amd64 "nvidia-kernel-dkms (= $v), nvidia-driver-cuda (= $v), nvidia-persistenced (= $v)"
}

index() {
  (
    cd "$1"
    dpkg-scanpackages --multiversion . /dev/null 2>/dev/null > Packages
    size=$(stat -c %s Packages); sha=$(sha256sum Packages | cut -d' ' -f1)
    cat > Release <<REL
Origin: vllm-fleet FAKE CUDA
Label: vllm-fleet FAKE CUDA
Architectures: amd64 all
Date: $(LC_ALL=C date -u -R)
SHA256:
 $sha $size Packages
REL
    gpg --batch --quiet --clearsign -o InRelease Release
  )
}

pkg cuda-keyring 1.1-1 all "" keyring_files
for v in 575.57.08-1 580.95.05-1 590.44.01-1; do
  driver_release "$v"
done
sha256sum "$repo/cuda-keyring_1.1-1_all.deb" | cut -d' ' -f1 > "$out/keyring.sha256"

later=$out/later/debian12/x86_64
mkdir -p "$later"
cp "$repo"/*.deb "$later/"
REPO_DIR=$later pkg cuda-keyring 1.2-1 all "" keyring_files
REPO_DIR=$later driver_release 580.105.08-1

index "$repo"
index "$later"
find "$repo" -mindepth 1 -maxdepth 1 | wc -l
