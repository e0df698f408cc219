#!/usr/bin/env bash
# Start (or check) the lab's Hugging Face Hub endpoint on loopback: it serves
# the tiny models from .lab/hub to the lab host (same network namespace).
#   lab/hub.sh start | stop | status
# LAB_HUB_HOST=<the lab network's gateway> runs a second one there for the
# containers on the lab's Docker network (lab/network.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."
port=${LAB_HUB_PORT:-8765}
root=${LAB_HUB_ROOT:-.lab/hub}
host=${LAB_HUB_HOST:-127.0.0.1}
# One server per address: loopback's keeps the names it always had.
suffix=$([ "$host" = 127.0.0.1 ] && echo "" || echo "-$host")
pidfile=.lab/hub$suffix.pid
log=.lab/hub$suffix.log
py=${PYTHON:-.venv/bin/python}

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

case "${1:-status}" in
  start)
    mkdir -p .lab
    gqa=$root/vllm-fleet-lab/tiny-gqa
    # The script keeps what is made and adds what is missing (tiny-gqa's extra revisions).
    if [ ! -f "$gqa/config.json" ] || [ ! -f "$root/vllm-fleet-lab/tiny-mla/config.json" ] \
      || [ ! -d "$gqa/.revisions/update-good" ] || [ ! -d "$gqa/.revisions/update-broken" ]; then
      "$py" lab/make_tiny_models.py --out "$root"
    fi
    if running; then
      echo "lab hub: running (pid $(cat "$pidfile")) on $host:$port"
      exit 0
    fi
    rm -f "$pidfile"  # not running: a pid left from a server that died
    setsid nohup "$py" lab/hub_server.py --root "$root" --host "$host" --port "$port" \
      --pidfile "$pidfile" >"$log" 2>&1 < /dev/null &
    server=$!
    for _ in $(seq 1 50); do
      # Our own server must be the one answering: another checkout's hub may hold the
      # port and answer while ours is still starting (it writes its pid file only once
      # it holds the port, and exits when it cannot have it).
      if ! kill -0 "$server" 2>/dev/null; then
        echo "lab hub: the server exited; log:" >&2
        cat "$log" >&2
        holder=$({ ss -Htlnp src "$host:$port"; ss -Htlnp src "0.0.0.0:$port"; } 2>/dev/null \
          | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
        if [ -n "$holder" ]; then
          where=$(readlink "/proc/$holder/cwd" 2>/dev/null || echo "?")
          echo "lab hub: port $port is held by pid $holder ($(tr '\0' ' ' < "/proc/$holder/cmdline" 2>/dev/null)) in $where." >&2
          echo "  Another checkout's lab: stop it with: cd $where && make lab-down" >&2
          echo "  (or only its Hub: cd $where && LAB_HUB_HOST=$host bash lab/hub.sh stop)," >&2
          echo "  or give this one another port: LAB_HUB_PORT=8766, and -e vllm_fleet_hf_endpoint=http://$host:8766 to the playbooks." >&2
        fi
        exit 1
      fi
      if [ "$(cat "$pidfile" 2>/dev/null)" = "$server" ] \
        && curl -fsS "http://$host:$port/api/models/vllm-fleet-lab/tiny-gqa/revision/main" >/dev/null 2>&1; then
        echo "lab hub: serving $root on http://$host:$port (pid $server)"
        exit 0
      fi
      sleep 0.2
    done
    echo "lab hub: did not answer on port $port; log:" >&2
    cat "$log" >&2
    exit 1
    ;;
  stop)
    if running; then
      pid=$(cat "$pidfile")
      kill "$pid"
      # Gone before the next start binds the same address.
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$pidfile"
    ;;
  status)
    if running; then echo "running (pid $(cat "$pidfile"))"; else echo "stopped"; exit 3; fi
    ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
