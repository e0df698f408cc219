#!/usr/bin/env bash
# ansible-test sanity for the collection. ansible-test wants the collection at
# .../ansible_collections/<namespace>/<name>; the repository root is the
# collection, so the tracked and new files are copied to such a path under
# .cache first. Each sanity test installs its Python requirements into a
# virtualenv of its own from PyPI; pip inside those comes from the pip wheel
# on PyPI through a small stand-in for get-pip.py, because the download host
# ansible-test uses for get-pip.py (ci-files.testing.ansible.com) is not
# reachable from these machines.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
[ -d .venv/bin ] && PATH="$root/.venv/bin:$PATH"
# Outside the repository: ansible-test lists its targets with git, and .cache is ignored here.
# A folder of this run's own: two checkouts (or worktrees) checked at once must not remove
# each other's copy mid-run.
work=$(mktemp -d "${TMPDIR:-/tmp}/vllm-fleet-ansible-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
dest=$work/ansible_collections/vllm_fleet/fleet
mkdir -p "$dest"
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$dest"

# The pip release ansible-test bootstraps its virtualenvs with.
pip_version=$(python -c 'import inspect, re, ansible_test._internal.python_requirements as r; print(re.search(r"pip=.([0-9.]+).", inspect.getsource(r)).group(1))')
cache=$HOME/.ansible/test/cache
shim=$cache/get_pip_${pip_version//./_}.py
if [ ! -f "$shim" ]; then
  mkdir -p "$cache"
  python -m pip download -q --no-deps -d "$cache" "pip==$pip_version"
  wheel=$(ls "$cache"/pip-"$pip_version"-*.whl)
  cat >"$shim" <<PY
# Stand-in for pypa's get-pip.py, written by vllm-fleet's scripts/sanity.sh:
# installs pip $pip_version into the running (new, empty) virtualenv from the
# wheel downloaded from PyPI, running pip from that wheel itself.
import runpy, sys
WHEEL = "$wheel"
sys.path.insert(0, WHEEL)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.argv = ["pip", "install", "--no-index", WHEEL] + [a for a in args if not a.startswith("pip==")]
runpy.run_module("pip", run_name="__main__", alter_sys=True)
PY
fi
cd "$dest"
ANSIBLE_COLLECTIONS_PATH="$root/.cache/collections" ansible-test sanity --python "$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')" --requirements "$@"
