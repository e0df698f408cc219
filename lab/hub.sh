#!/usr/bin/env bash
# Start (or check) the lab's Hugging Face Hub endpoint on loopback: it serves
# the tiny models from .lab/hub to the lab host (same network namespace).
#   lab/hub.sh start | stop | status
set -euo pipefail
cd "$(dirname "$0")/.."
port=${LAB_HUB_PORT:-8765}
root=${LAB_HUB_ROOT:-.lab/hub}
pidfile=.lab/hub.pid
log=.lab/hub.log
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
      echo "lab hub: running (pid $(cat "$pidfile")) on 127.0.0.1:$port"
      exit 0
    fi
    setsid nohup "$py" lab/hub_server.py --root "$root" --host 127.0.0.1 --port "$port" \
      --pidfile "$pidfile" >"$log" 2>&1 < /dev/null &
    for _ in $(seq 1 50); do
      # Our own server must be the one answering (another checkout's hub may hold the port).
      if ! kill -0 $! 2>/dev/null; then
        echo "lab hub: the server exited (is another lab hub on port $port? LAB_HUB_PORT picks another); log:" >&2
        cat "$log" >&2
        exit 1
      fi
      if curl -fsS "http://127.0.0.1:$port/api/models/vllm-fleet-lab/tiny-gqa/revision/main" >/dev/null 2>&1; then
        echo "lab hub: serving $root on http://127.0.0.1:$port (pid $(cat "$pidfile"))"
        exit 0
      fi
      sleep 0.2
    done
    echo "lab hub: did not answer on port $port; log:" >&2
    cat "$log" >&2
    exit 1
    ;;
  stop)
    if running; then kill "$(cat "$pidfile")"; fi
    rm -f "$pidfile"
    ;;
  status)
    if running; then echo "running (pid $(cat "$pidfile"))"; else echo "stopped"; exit 3; fi
    ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
