# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Two warm-switch faults on the Molecule cutover host (issue 44), each a real switch.

Each leg runs `site.yml -e model=GREEN -e vllm_fleet_switch_mode=warm` through
ansible-runner (bench/cutover.py's deploy), reads the switch's own result and the front
door, prints them as JSON and exits 1 naming every expectation it missed.

  long-stream    A 480-token stream (ignore_eos) on blue's own port, started as the switch's
                 job starts on the host, outlasts the drain's deadline (--drain-timeout, 1 s):
                 it is ended (vLLM's POST /abort_requests, then /sleep?mode=abort) before
                 blue's fingerprint and sleep, the result counts it (blue_aborted), the
                 client's stream ends as docs/warm-switch.md says (HTTP 200, a last chunk with
                 finish_reason "abort", then `data: [DONE]`), green's wake is checked by its
                 fingerprint (green_health.fingerprint "matched") and green serves.
  wrong-weights  Green sleeps with other weights loaded into it (the scenario reloads them
                 while it sleeps: POST /collective_rpc reload_weights); woken, it answers
                 other tokens. Its fingerprint gate refuses it (stage "fingerprint", naming the
                 tokens that differ), green is stopped (failed_wakes, not put back to sleep),
                 blue is woken back (its own fingerprint matched) and serves: rc 2.

  .venv/bin/python bench/warm_faults.py long-stream --inventory INV \\
      --frontdoor http://127.0.0.1:8030 --green tiny_gqa --blue-url http://127.0.0.1:8032 \\
      --blue-name tiny-mla
"""

import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse

from cutover import HEADERS, active_model, deploy

HTTP_OK = 200
FAILED_RUN = 2  # ansible-playbook's rc when a task failed on a host
STREAM_TOKENS = 480  # within the lab models' max_model_len (512): about 6 s on one core


def stream(url, model, tokens, out):
    """One streamed completion on `url` (a model's own port): what its client saw."""
    parts = urllib.parse.urlsplit(url)
    body = {"model": model, "prompt": "Count slowly.", "max_tokens": tokens, "ignore_eos": True,
            "temperature": 0, "stream": True}
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    start = time.monotonic()
    out.update(chunks=0, finish_reason=None, done=False, status=None, error="")
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), HEADERS)
        resp = conn.getresponse()
        out["status"] = resp.status
        for raw in resp:
            line = raw.decode(errors="replace").strip()
            if line == "data: [DONE]":
                out["done"] = True
            elif line.startswith("data: {"):
                out["chunks"] += 1
                reason = json.loads(line[6:])["choices"][0].get("finish_reason")
                out["finish_reason"] = reason or out["finish_reason"]
    except (OSError, http.client.HTTPException, ValueError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    out["seconds"] = round(time.monotonic() - start, 2)


def streams_until_cut(url, model, tokens, out, stop):
    """Streams on blue's own port, one after another, until one does not run to its length
    (the drain's deadline aborted it, or it failed) or `stop` is set: whatever the switch
    takes between its job's start and blue's drain, a stream is running when the drain's
    deadline passes. One 480-token stream lasted 2.7 s on the lab; CI-G of 90f92f5 saw it
    end by its length 1.2 s into a 1 s drain (drained, nothing aborted). `out` is the last
    stream, with `streams`, how many ran."""
    count = 0
    while True:
        one = {}
        stream(url, model, tokens, one)
        count += 1
        out.clear()
        out.update(one, streams=count)
        if one.get("finish_reason") != "length" or one.get("error") or stop.is_set():
            return


def switch_started(event):
    """Whether an ansible-runner event is the switch's asynchronous job starting on the host
    (roles/vllm_model/tasks/cutover.yml: vllm_cutover with poll 0 answers its job id)."""
    data = event.get("event_data") or {}
    return (event.get("event") == "runner_on_ok"
            and data.get("task_action", "").endswith("vllm_cutover")
            and "ansible_job_id" in (data.get("res") or {}))


def long_stream(args):
    seen, started, stop = {}, threading.Event(), threading.Event()
    client = threading.Thread(target=streams_until_cut, daemon=True,
                              args=(args.blue_url, args.blue_name, STREAM_TOKENS, seen, stop))

    def on_event(event):
        if switch_started(event) and not started.is_set():
            started.set()
            client.start()
        return True

    rc, res = deploy(args.inventory, args.green, "sequential",
                     {"vllm_fleet_switch_mode": "warm",
                      "vllm_fleet_drain_timeout_s": args.drain_timeout}, event_handler=on_event)
    stop.set()
    if started.is_set():
        client.join(130)
    drain = res.get("blue_drain") or {}
    missed = [m for ok, m in [
        (started.is_set(), "the switch's job was never seen starting"),
        (rc == 0, f"the switch failed (rc {rc}): {res.get('msg', '')}"),
        (res.get("switch") == "warm",
         f"the switch was {res.get('switch')!r}, not warm ({res.get('warm_refused', '')})"),
        (drain.get("drained") is False,
         f"blue was drained before the deadline ({drain}): the stream ended too soon"),
        ((res.get("blue_aborted") or 0) >= 1, f"blue_aborted is {res.get('blue_aborted')!r}"),
        (seen.get("status") == HTTP_OK, f"the stream's status was {seen.get('status')!r}"),
        (seen.get("finish_reason") == "abort",
         f"the stream's last finish_reason was {seen.get('finish_reason')!r}, not 'abort'"),
        (seen.get("done") and not seen.get("error"),
         f"the stream did not end with [DONE] ({seen.get('error') or 'no error'})"),
        (0 < seen.get("chunks", 0) < STREAM_TOKENS,
         f"the stream carried {seen.get('chunks')} of {STREAM_TOKENS} tokens"),
        ((res.get("green_health") or {}).get("fingerprint") == "matched",
         f"green's wake was not checked by its fingerprint: {res.get('green_health')}"),
        (active_model(args.frontdoor) == args.green,
         f"the front door's record names {active_model(args.frontdoor)!r}"),
    ] if not ok]
    return {"leg": "long-stream", "rc": rc, "stream": seen, "blue_drain": drain,
            "blue_aborted": res.get("blue_aborted"), "blue_sleep_s": res.get("blue_sleep_s"),
            "green_health": res.get("green_health"), "missed": missed}


def wrong_weights(args):
    rc, res = deploy(args.inventory, args.green, "sequential", {"vllm_fleet_switch_mode": "warm"})
    gate = res.get("green_health") or {}
    wakes = res.get("failed_wakes") or []
    blue = res.get("blue_health") or {}
    missed = [m for ok, m in [
        (rc == FAILED_RUN, f"the switch's playbook rc was {rc}, not 2 (a failed switch)"),
        (gate.get("stage") == "fingerprint" and "differ" in str(gate.get("detail")),
         f"green's gate did not fail at its fingerprint: {gate}"),
        ([(w.get("model"), w.get("role"), w.get("stopped")) for w in wakes]
         == [(args.green, "green", True)], f"failed_wakes is {wakes}"),
        (blue.get("ok") and blue.get("fingerprint") == "matched",
         f"blue's wake back was not checked by its fingerprint: {blue}"),
        ("Rolled back" in str(res.get("msg")), f"the message says: {res.get('msg')}"),
        (active_model(args.frontdoor) not in (None, args.green),
         f"the front door's record names {active_model(args.frontdoor)!r}"),
    ] if not ok]
    return {"leg": "wrong-weights", "rc": rc, "msg": res.get("msg"), "green_health": gate,
            "failed_wakes": wakes, "blue_health": blue, "missed": missed}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("leg", choices=("long-stream", "wrong-weights"))
    parser.add_argument("--inventory", required=True)
    parser.add_argument("--frontdoor", required=True, help="the host's front door URL")
    parser.add_argument("--green", required=True, help="the catalog name to switch to")
    parser.add_argument("--blue-url", help="long-stream: blue's own URL (its port)")
    parser.add_argument("--blue-name", help="long-stream: blue's served model name")
    parser.add_argument("--drain-timeout", type=float, default=1.0,
                        help="long-stream: the switch's drain deadline, seconds")
    args = parser.parse_args()
    if args.leg == "long-stream" and not (args.blue_url and args.blue_name):
        parser.error("long-stream needs --blue-url and --blue-name")
    out = long_stream(args) if args.leg == "long-stream" else wrong_weights(args)
    print(json.dumps(out, indent=1, default=str))
    for line in out["missed"]:
        print(f"MISSED: {line}", file=sys.stderr)
    return 1 if out["missed"] else 0


if __name__ == "__main__":
    sys.exit(main())
