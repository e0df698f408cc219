# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""A sleeping model woken and trusted again, or stopped: the wake half of a warm switch.

vLLM's sleep routes (engine/vllm_engine.py) answer whether a model sleeps and wake it;
after a wake the model's health gate runs on the running unit (no start), its main
process must be the one that slept, and it must compute what it computed before it slept
(fingerprint.py). A wake that fails leaves no live process: its unit is stopped and
listed in `failed_wakes` (issue 44 case 4). The cutover (cutover.py) decides when to
sleep and wake; this module only does it.
"""

import contextlib
import json
import math

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.errors import FieldsError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine import vllm_engine as engine
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
    drain,
    server_load,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import fingerprint as prints
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.units import UnitError

HTTP_OK = 200


class WakeError(FieldsError):
    """A sleep or wake that did not happen as asked; the cutover raises it as its own error."""


def still_running(drain_outcome):
    """How many requests a drain that timed out left on the model (frontdoor.drain's dict):
    vLLM's /load count or its running and waiting gauges, whichever says more."""
    return max(int(drain_outcome.get("in_flight") or 0),
               int(drain_outcome.get("running") or 0) + int(drain_outcome.get("waiting") or 0))


class Waker:
    """Sleep state and wakes of the model services on `host` (request, clock, sleep, wall),
    their units through `systemd`, their health through `gate` (units.UnitGate).
    `settings.drain_timeout` bounds the quiet wait before a fingerprint. Bounds: `request_s`
    for one sleep or wake request, `confirm_s` for /is_sleeping to say so (polled every
    `poll_s`), `quiet_s` for what runs on a woken model before its fingerprint."""

    def __init__(self, host, systemd, gate, settings, *, request_s, confirm_s, poll_s, quiet_s):
        self.host = host
        self.systemd = systemd
        self.gate = gate
        self.settings = settings
        self.request_s = request_s
        self.confirm_s = confirm_s
        self.poll_s = poll_s
        self.quiet_s = quiet_s
        self.last_answer = None  # /is_sleeping's last answer, for an error
        self.failed_wakes = []  # units stopped because their wake failed (_stop_failed)

    def queued(self, svc):
        """Requests vLLM's /load counts on a sleeping server (0 when it has no /load)."""
        got = self.host.request("GET", svc["url"] + engine.LOAD, None, 5.0)
        return (server_load(got.body) or 0) if got.status == HTTP_OK else 0

    def is_sleeping(self, svc):
        """GET /is_sleeping: True, False, or None (no answer that says)."""
        got = self.host.request("GET", svc["url"] + engine.IS_SLEEPING, None, 10.0)
        self.last_answer = f"{got.status} {got.body[:200]}" if got.status else got.error
        if got.status == HTTP_OK:
            with contextlib.suppress(ValueError, AttributeError):
                said = json.loads(got.body).get("is_sleeping")
                return said if isinstance(said, bool) else None
        return None

    def confirm_sleeping(self, svc, wanted, role):
        """Poll GET /is_sleeping until it says `wanted`, for at most `confirm_s`."""
        asked = self.host.clock()
        while True:
            said = self.is_sleeping(svc)
            if said is wanted:
                return
            if self.host.clock() - asked >= self.confirm_s:
                raise WakeError(
                    f"{role} {svc['model']} {'did not go to sleep' if wanted else 'did not wake'}"
                    f": GET /is_sleeping answered {self.last_answer} after {self.confirm_s:g} s "
                    f"(wanted is_sleeping {str(wanted).lower()})")
            self.host.sleep(self.poll_s)

    def wake(self, svc, level, role, fingerprint=None):
        """Wake `svc` (its unit runs, asleep at `level`) and gate it; a wake that fails (a
        step's error or timeout, the gate after it) leaves no live process: its unit is
        stopped (_stop_failed). Returns (the gate's outcome, the wake's seconds)."""
        try:
            gate, woke_s = self._wake_and_gate(svc, level, role, fingerprint)
        except WakeError as exc:
            raise WakeError(exc.msg + self._stop_failed(svc, level, role, exc.msg),
                            **exc.fields) from None
        if not gate["ok"]:
            said = self._stop_failed(svc, level, role, f"its gate failed at "
                                     f"{gate['stage']}: {gate['detail']}")
            gate = dict(gate, detail=gate["detail"] + said)
        return gate, woke_s

    def _stop_failed(self, svc, level, role, why):
        """Stop a unit whose wake failed (issue 44 case 4: on the GPU a level-2 reload beside a
        sleeper ran out of memory at wake_up?tags=kv_cache and the process stayed alive,
        never answering): it is not left running, awake or not. Its entry goes into
        `failed_wakes` (the result's); returns what the message adds."""
        stopped = self.systemd.try_act("stop", svc["unit"])
        self.failed_wakes.append({"model": svc["model"], "unit": svc["unit"], "role": role,
                                  "level": level, "why": why, "stopped": stopped})
        return ("; its unit was stopped (a failed wake leaves no live process)" if stopped else
                f"; its unit could NOT be stopped (systemctl stop {svc['unit']} failed): its "
                f"process may still hold the GPUs")

    def _main_pid(self, unit):
        try:
            return int(self.systemd.show(unit).get("MainPID") or 0)
        except UnitError as exc:
            raise WakeError(exc.msg, **exc.fields) from None

    def _wake_and_gate(self, svc, level, role, fingerprint=None):
        """Wake `svc`, confirm it is awake, then its health gate on the running unit: no
        start, and its main process must be the one that slept (and compute what it did)."""
        unit = svc["unit"]
        main_before = self._main_pid(unit)
        start = self.host.clock()
        # A sleep that failed (or never came) left it awake: its gate alone says whether it
        # serves. Only one that says it sleeps gets the wake requests.
        try:
            steps = engine.wake_steps(level) if self.is_sleeping(svc) is not False else ()
        except ValueError as exc:  # a record that says another level than vLLM has
            raise WakeError(f"{role} {svc['model']} cannot be woken: {exc}") from None
        for method, path, payload in steps:
            timeout = (float(svc.get("startup_timeout_s") or self.request_s)
                       if path == engine.COLLECTIVE_RPC else self.request_s)
            got = self.host.request(method, svc["url"] + path, payload, timeout)
            if got.status != HTTP_OK:
                raise WakeError(f"{role} {svc['model']} did not wake: {method} {path} "
                                f"answered {got.status or got.error} "
                                f"{got.body[:200]}".rstrip())
        self.confirm_sleeping(svc, False, role)
        woke_s = round(self.host.clock() - start, 2)
        try:
            baseline = self.gate.baseline(svc)
            gate = self.gate.watch(svc, baseline, self.host.wall(), role, since=self.host.clock())
        except UnitError as exc:
            raise WakeError(exc.msg, **exc.fields) from None
        main_after = self._main_pid(unit)
        if gate["ok"] and main_after != main_before:
            gate = dict(gate, ok=False, stage="process",
                        detail=f"{unit}'s main process changed from {main_before} to "
                               f"{main_after} while it woke: it was restarted, not woken")
        if gate["ok"]:
            gate = self._check_fingerprint(svc, gate, fingerprint)
        return gate, woke_s

    def _check_fingerprint(self, svc, gate, fingerprint):
        """A woken model must compute what it computed before it slept (issue 44, case 1):
        the same greedy token ids, logprobs within prints.LOGPROB_TOLERANCE. A model that
        slept without one, or whose fingerprint cannot be taken now, is not trusted."""
        if not fingerprint:
            return dict(gate, ok=False, stage="fingerprint",
                        detail="no fingerprint was taken before it slept: its wake cannot "
                               "be checked")
        quiet = drain(svc["url"], min(self.quiet_s, self.settings.drain_timeout),
                      request=self.host.request, clock=self.host.clock, sleep=self.host.sleep,
                      quiet_reads=1)
        try:
            now = prints.take(svc["url"], svc["served_model_name"], self.host.request)
        except prints.FingerprintError as exc:
            return dict(gate, ok=False, stage="fingerprint", detail=exc.msg)
        beside = (fingerprint.get("beside") or 0) if quiet["drained"] else still_running(quiet)
        why = prints.differs(fingerprint, now, math.inf if beside else prints.LOGPROB_TOLERANCE)
        if why:
            return dict(gate, ok=False, stage="fingerprint", detail=why)
        if beside:  # one of the two answered beside other requests: its token ids alone
            return dict(gate, fingerprint="matched", fingerprint_beside=beside)
        return dict(gate, fingerprint="matched")
