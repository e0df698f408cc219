#!/usr/bin/env bash
# The collection as a user installs it, offline: build the vllm_fleet.fleet
# tarball, build tarballs of the collections it depends on from the copies
# scripts/setup.sh unpacked from PyPI's ansible wheel (.cache/collections),
# install them all with `ansible-galaxy collection install --offline` into a
# folder outside the checkout, and run the plan by FQCN from another folder
# outside it, with that install as the only collections path. Passes when the
# tarball leaves the lab out, every collection its YAML calls is declared, an
# install without the dependencies is refused, and the plan prints the table
# docs/plan-example.txt shows, under the checkout's YAML result format and as
# lines under Ansible's default callback (as installed, with no ansible.cfg).
# Run by `make test` (make collection-test).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
[ -d .venv/bin ] && PATH="$root/.venv/bin:$PATH"
py=$(command -v python)
work=$(mktemp -d "${TMPDIR:-/tmp}/vllm-fleet-collection.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/dist" "$work/installed" "$work/run"
step() { printf '\n== collection-test: %s\n' "$*"; }

# Nothing of the checkout's Ansible settings (its ansible.cfg: every command
# below runs in $work; the Makefile's ANSIBLE_COLLECTIONS_PATH) or of the
# Python's own ansible_collections.
unset ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH ANSIBLE_COLLECTIONS_PATHS ANSIBLE_ROLES_PATH
export ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false
cd "$work"

step "build vllm_fleet.fleet"
ansible-galaxy collection build --output-path "$work/dist" "$root"
tarball=$(ls "$work/dist"/vllm_fleet-fleet-*.tar.gz)
tar tzf "$tarball" >"$work/contents.txt"
for kept in lab/ scripts/ tests/ molecule/ bench/ inventory/lab/ .ci/ .config/ Makefile site.yml \
            ansible.cfg playbooks/lab.yml; do
  if grep -q "^${kept//./\\.}" "$work/contents.txt"; then
    echo "FAIL: the tarball carries ${kept} (galaxy.yml build_ignore)" >&2
    exit 1
  fi
done
for wanted in playbooks/deploy.yml playbooks/plan.yml playbooks/group_vars/all/site.yml \
              roles/vllm_benchmark/files/report.py; do
  grep -qx "$wanted" "$work/contents.txt" || { echo "FAIL: the tarball lacks $wanted" >&2; exit 1; }
done

# Each dependency galaxy.yml declares, built from its PyPI wheel copy. That
# copy has the release's MANIFEST.json but a FILES.json listing files the
# wheel left out, so it is rebuilt: a galaxy.yml made from the MANIFEST's
# collection_info (same name and version), in a scratch copy.
step "build the dependencies from .cache/collections"
mapfile -t deps < <("$py" -c '
import sys, yaml
for name in yaml.safe_load(open(sys.argv[1]))["dependencies"] or {}: print(name)' "$root/galaxy.yml")
[ "${#deps[@]}" -gt 0 ] || { echo "FAIL: galaxy.yml declares no dependencies" >&2; exit 1; }
for dep in "${deps[@]}"; do
  src=$root/.cache/collections/ansible_collections/${dep/.//}
  [ -f "$src/MANIFEST.json" ] || { echo "FAIL: $dep is not in .cache/collections (make setup)" >&2; exit 1; }
  copy=$work/src/$dep
  mkdir -p "$copy" && cp -r "$src/." "$copy/"
  "$py" -c '
import json, sys
info = json.load(open(sys.argv[1] + "/MANIFEST.json"))["collection_info"]
json.dump({k: v for k, v in info.items() if v not in (None, [], "")}, open(sys.argv[1] + "/galaxy.yml", "w"))' "$copy"
  ansible-galaxy collection build --output-path "$work/dist" "$copy"
done

# The declared dependencies are what the install needs: without their
# tarballs an offline install of the collection is refused.
step "install offline without the dependencies (refused)"
if ansible-galaxy collection install --offline -p "$work/alone" "$tarball" >"$work/alone.log" 2>&1; then
  echo "FAIL: installed without ${deps[*]}; galaxy.yml's dependencies are not declared" >&2
  exit 1
fi
grep -q "${deps[0]}" "$work/alone.log" || { cat "$work/alone.log" >&2; exit 1; }
echo "refused, naming ${deps[0]}"

step "install offline into $work/installed"
ansible-galaxy collection install --offline -p "$work/installed" "$work"/dist/*.tar.gz

# Every collection the installed YAML calls (a module key, a filter, a
# lookup) is ansible.builtin, this collection, or one galaxy.yml declares.
step "collections the installed playbooks and roles call"
"$py" - "$work/installed/ansible_collections/vllm_fleet/fleet" "${deps[@]}" <<'PY'
import pathlib, re, sys
top, declared = pathlib.Path(sys.argv[1]), {"ansible.builtin", "vllm_fleet.fleet", *sys.argv[2:]}
call = re.compile(r"^\s*-?\s*([a-z]\w*\.[a-z]\w*)\.\w+:|\|\s*([a-z]\w*\.[a-z]\w*)\.\w+"
                  r"|(?:lookup|query)\(\s*['\"]([a-z]\w*\.[a-z]\w*)\.\w+", re.M)
used = {}
for path in sorted(top.rglob("*.yml")):
    for match in call.finditer(path.read_text()):
        used.setdefault(next(g for g in match.groups() if g), []).append(str(path.relative_to(top)))
missing = {name: sorted(set(files)) for name, files in used.items() if name not in declared}
if missing:
    sys.exit(f"FAIL: called but not in galaxy.yml's dependencies: {missing}")
print("called:", ", ".join(f"{name} ({len(files)} calls)" for name, files in sorted(used.items())))
PY

step "ansible-playbook vllm_fleet.fleet.plan, from $work/run"
cat >"$work/run/inventory.yml" <<'YAML'
---
all:
  hosts:
    localhost:
      ansible_connection: local
YAML
# What the plan printed (stdout) apart from what Python or Ansible warned about
# (stderr): a warning naming a file of the checkout's .venv (cryptography's
# deprecations name the module that imported them) is not the plan reading
# the checkout; a path of the checkout in the plan's own output is.
(
  cd run
  ANSIBLE_COLLECTIONS_PATH=$work/installed ANSIBLE_CALLBACK_RESULT_FORMAT=yaml \
    ansible-playbook vllm_fleet.fleet.plan -i inventory.yml \
    -e models=kimi_k25_nvfp4,minimax_m25 -e hardware=rtx_pro_6000_x8_pcie
) >"$work/plan.log" 2>"$work/plan.err" || {
  cat "$work/plan.log" "$work/plan.err" >&2; echo "FAIL: the plan did not run" >&2; exit 1; }
bash "$root/scripts/plan-read-checkout.sh" "$root" "$work/plan.log" "$work/plan.err"
# The table: from "Plan on" to the first empty line, the callback's indent off.
sed -n '/^ *Plan on /,/^ *$/p' "$work/plan.log" | sed -e 's/^        //' -e '/^$/d' >"$work/plan.txt"
if ! diff -u <(sed '/^$/d' "$root/docs/plan-example.txt") "$work/plan.txt"; then
  # $work goes at exit: the new table is kept where the message says.
  mkdir -p "$root/.cache" && cp "$work/plan.txt" "$root/.cache/plan-example.new.txt"
  echo "FAIL: the installed plan differs from docs/plan-example.txt (above); if the catalog or" \
       "a profile changed it on purpose, copy the new table ($root/.cache/plan-example.new.txt)" \
       "into the example" >&2
  exit 1
fi
grep -E "^ *(Plan on|verdict)" "$work/plan.log"

# As a user runs it: no ansible.cfg and no callback settings, so Ansible's
# default callback prints results as JSON. The plan and the warm switch plan
# must come out as lines (one list item per line), never one string of \n
# escapes: the table's items up to the first empty one are
# docs/plan-example.txt's lines (warm switches add a plan, not table rows).
step "ansible-playbook vllm_fleet.fleet.plan, Ansible's default callback (JSON results)"
(
  cd run
  env -u ANSIBLE_CALLBACK_RESULT_FORMAT -u ANSIBLE_STDOUT_CALLBACK -u ANSIBLE_CALLBACK_FORMAT_PRETTY \
    ANSIBLE_COLLECTIONS_PATH="$work/installed" \
    ansible-playbook vllm_fleet.fleet.plan -i inventory.yml \
    -e models=kimi_k25_nvfp4,minimax_m25 -e hardware=rtx_pro_6000_x8_pcie -e vllm_fleet_switch_mode=warm
) >"$work/plan-default.log" 2>"$work/plan-default.err" || {
  cat "$work/plan-default.log" "$work/plan-default.err" >&2; echo "FAIL: the plan did not run" >&2; exit 1; }
bash "$root/scripts/plan-read-checkout.sh" "$root" "$work/plan-default.log" "$work/plan-default.err"
if grep -nF '\n' "$work/plan-default.log" >&2; then
  printf '%s\n' 'FAIL: under the default callback the plan printed \n escapes (above), not lines' >&2
  exit 1
fi
"$py" - "$work/plan-default.log" "$root/docs/plan-example.txt" <<'PY'
import json, re, sys
out = open(sys.argv[1]).read()

def lines(task):
    found = re.search(r"^TASK \[[^\n]*" + task + r"\][^\n]*\nok: \[localhost\] => (\{\n.*?\n\})$",
                      out, re.M | re.S)
    if not found:
        sys.exit(f"FAIL: no result of {task!r} under the default callback")
    msg = json.loads(found.group(1))["msg"]
    if not isinstance(msg, list):
        sys.exit(f"FAIL: under the default callback {task!r} is one {type(msg).__name__}, not lines")
    return msg

plan, warm = lines("Show the candidates side by side"), lines("Show the warm switch plan")
table = plan[:plan.index("")] if "" in plan else plan
wanted = [line for line in open(sys.argv[2]).read().splitlines() if line]
if table != wanted:
    sys.exit("FAIL: the plan's lines under the default callback differ from docs/plan-example.txt:\n"
             + "\n".join(table))
if not warm[0].startswith("Warm switches kimi_k25_nvfp4 <-> minimax_m25"):
    sys.exit(f"FAIL: the warm switch plan begins {warm[0]!r}")
print(f"default callback: the plan in {len(plan)} lines (its table as docs/plan-example.txt),"
      f" the warm switch plan in {len(warm)}")
PY
echo "collection-test: built, installed offline (${deps[*]} too), plan by FQCN printed docs/plan-example.txt" \
     "(as a YAML block and, under the default callback, as lines)"
