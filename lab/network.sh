#!/usr/bin/env bash
# The lab's Docker network for the scenarios with several hosts (fleet,
# multinode): a user-defined bridge, vllm-fleet-lab (172.31.250.0/24), whose
# containers reach each other by name, and the lab Hub on the bridge's
# gateway (the controller's side, 172.31.250.1) so they can download from it.
# Test traffic stays between the controller and the lab's own containers: the
# Hub binds that address only, and nothing is published on the controller.
#   lab/network.sh up | down | status
set -euo pipefail
cd "$(dirname "$0")/.."
name=${LAB_NETWORK:-vllm-fleet-lab}
subnet=${LAB_NETWORK_SUBNET:-172.31.250.0/24}
gateway=${LAB_NETWORK_GATEWAY:-172.31.250.1}

case "${1:-status}" in
  up)
    if ! docker network inspect "$name" >/dev/null 2>&1; then
      docker network create --driver bridge --subnet "$subnet" --gateway "$gateway" \
        --label vllm-fleet.lab=true "$name" >/dev/null
      echo "lab network: created $name ($subnet)"
    fi
    found=$(docker network inspect -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}' "$name")
    if [ "$found" != "$gateway" ]; then
      echo "lab network: $name has gateway $found, wanted $gateway (docker network rm $name)" >&2
      exit 1
    fi
    # Restarted each time: a Hub left from a network that was removed and made
    # again would hold a socket on the old bridge.
    LAB_HUB_HOST=$gateway bash lab/hub.sh stop
    LAB_HUB_HOST=$gateway bash lab/hub.sh start
    ;;
  down)
    LAB_HUB_HOST=$gateway bash lab/hub.sh stop
    if docker network inspect "$name" >/dev/null 2>&1; then
      docker network rm "$name" >/dev/null
    fi
    ;;
  status)
    docker network inspect -f '{{.Name}} {{range .IPAM.Config}}{{.Subnet}}{{end}}' "$name"
    LAB_HUB_HOST=$gateway bash lab/hub.sh status
    ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
