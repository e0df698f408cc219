# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Health gate for a vLLM OpenAI-compatible server (stdlib only).

A server passes when, in order: GET /health answers 200, GET /v1/models lists
the expected served model name, and one completion returns at least one
token. The HTTP getter is a parameter so tests drive the logic.
"""

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

HTTP_OK = 200
LOOPBACK = ("127.0.0.1", "::1", "localhost")


class HttpResult:
    """Status, body text; `error` holds the reason when no response came."""

    def __init__(self, status=None, body="", error=None):
        self.status = status
        self.body = body
        self.error = error


def metric_totals(text):
    """{metric: sum of its samples over all label sets} from Prometheus text exposition."""
    totals = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, brace, rest = line.partition("{")
        if brace:
            rest = rest.rpartition("}")[2]
        else:
            name, _sep, rest = line.partition(" ")
        fields = rest.split()
        try:
            value = float(fields[0])
        except (ValueError, IndexError):
            continue
        totals[name.strip()] = totals.get(name.strip(), 0.0) + value
    return totals


def _loopback_tls_context(url):
    """No certificate check for https on this host's own loopback, the default otherwise.

    The front door's certificate names the host's public name; the tools on the host
    reach it at 127.0.0.1, over a connection that never leaves the machine.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https" and parts.hostname in LOOPBACK:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # loopback only, see above
        return context
    return None


def urllib_request(method, url, payload=None, timeout=10.0, headers=None):
    """Default HTTP client: urllib, JSON in and out; `headers` are added to the request."""
    data = None
    sent = {"Accept": "application/json", **(headers or {})}
    if payload is not None:
        data = json.dumps(payload).encode("utf-8")
        sent["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, headers=sent, method=method)  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=timeout,  # noqa: S310
                                    context=_loopback_tls_context(url)) as resp:
            return HttpResult(resp.status, resp.read().decode("utf-8", "replace"))
    except urllib.error.HTTPError as exc:
        return HttpResult(exc.code, exc.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        return HttpResult(error=str(reason))


def check_once(base_url, served_model_name, smoke_prompt="Hello", max_tokens=4,  # noqa: PLR0911
               request=urllib_request, timeout=30.0):
    """One pass of the gate. Returns (ok, stage, detail).

    stage is the step reached: 'health', 'models', 'completion' or 'ok'.
    """
    base = base_url.rstrip("/")
    res = request("GET", base + "/health", timeout=min(timeout, 10.0))
    if res.status != HTTP_OK:
        return False, "health", f"GET /health: {res.error or f'HTTP {res.status}'}"
    res = request("GET", base + "/v1/models", timeout=min(timeout, 10.0))
    if res.status != HTTP_OK:
        return False, "models", f"GET /v1/models: {res.error or f'HTTP {res.status}'}"
    try:
        names = [m.get("id") for m in json.loads(res.body).get("data", [])]
    except (ValueError, AttributeError, TypeError):
        return False, "models", f"GET /v1/models: not JSON: {res.body[:200]!r}"
    if served_model_name not in names:
        return False, "models", (
            f"GET /v1/models: wanted model {served_model_name!r}, server lists {names}"
        )
    payload = {"model": served_model_name, "prompt": smoke_prompt,
               "max_tokens": max_tokens, "temperature": 0}
    res = request("POST", base + "/v1/completions", payload, timeout=timeout)
    if res.status != HTTP_OK:
        return False, "completion", (
            f"POST /v1/completions: {res.error or f'HTTP {res.status}: {res.body[:200]}'}"
        )
    try:
        body = json.loads(res.body)
        tokens = int(body.get("usage", {}).get("completion_tokens", 0))
        text = (body.get("choices") or [{}])[0].get("text") or ""
    except (ValueError, AttributeError, TypeError):
        return False, "completion", f"POST /v1/completions: not JSON: {res.body[:200]!r}"
    if tokens < 1:
        return False, "completion", "POST /v1/completions: answered with 0 completion tokens"
    return True, "ok", f"{tokens} completion tokens: {text[:60]!r}"


def _refused(listener):
    """Why the port is someone else's (the gate fails), or None."""
    if listener is None:
        return None
    found = listener()
    return found.message if found.refused else None


def _trusted(listener, stage, detail):
    """(ok, stage, detail, refused) of a pass that answered: ok only while the unit's own
    process listens; not trusted otherwise (stage `listener`, what was found), refused when
    someone else listens."""
    found = listener()
    if found.trusted:
        return True, stage, detail, False
    return False, "listener", f"answered ({detail}) but {found.message}", found.refused


def wait_healthy(base_url, served_model_name, timeout_s, interval_s=2.0, smoke_prompt="Hello",
                 request=urllib_request, alive=None, clock=time.monotonic, sleep=time.sleep,
                 since=None, listener=None):
    """Poll the gate until it passes, `alive()` says the server died, or time runs out.

    `alive` returns (True, "") while the server process may still come up, or
    (False, reason) once it has failed (a crash, a restart loop), so a broken
    server fails the gate at once instead of after the whole timeout; a third
    element, when given, names the stage (default `process`; `stall` for a start
    that stopped printing).
    `since` is the clock's time the server was started (default: now): `seconds` and
    the timeout count from it.
    `listener`, when given, says who listens on the server's port (listener.judge: a
    Listening). It is asked before each pass (someone else's listener fails the gate at
    once, stage `listener`, before any request goes to it) and again when a pass would say
    ok: the gate passes only while the unit's own process listens (issue 45, case 2).
    Returns a dict: ok, seconds, stage, detail, attempts.
    """
    start = clock() if since is None else since
    attempts = 0
    stage, detail = "health", "not tried"
    while True:
        attempts += 1
        refused = _refused(listener)
        if refused is not None:
            return {"ok": False, "seconds": round(clock() - start, 2), "stage": "listener",
                    "detail": refused, "attempts": attempts}
        ok, stage, detail = check_once(base_url, served_model_name, smoke_prompt,
                                       request=request)
        refused = False
        if ok and listener is not None:
            ok, stage, detail, refused = _trusted(listener, stage, detail)
        elapsed = clock() - start
        if refused:
            return {"ok": False, "seconds": round(elapsed, 2), "stage": stage,
                    "detail": detail, "attempts": attempts}
        if ok:
            return {"ok": True, "seconds": round(elapsed, 2), "stage": stage,
                    "detail": detail, "attempts": attempts}
        if stage == "models" and "wanted model" in detail:
            # A healthy server that serves another model will not change its mind.
            return {"ok": False, "seconds": round(elapsed, 2), "stage": stage,
                    "detail": detail, "attempts": attempts}
        if alive is not None:
            up, why, *named = alive()
            if not up:
                return {"ok": False, "seconds": round(clock() - start, 2),
                        "stage": named[0] if named else "process",
                        "detail": why, "attempts": attempts}
        if elapsed >= timeout_s:
            return {"ok": False, "seconds": round(elapsed, 2), "stage": stage,
                    "detail": f"not healthy after {timeout_s} s (last: {detail})",
                    "attempts": attempts}
        sleep(interval_s)
