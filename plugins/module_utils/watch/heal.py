# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""What the probe mends beside the model (issue 46): an unreadable deployment record, and a
front door that disagrees with the record (stdlib only; shipped beside probe.py).

Each fault has a name, said in the journal and kept in the probe's state:

  record_unreadable  the record is there but zero-length, not JSON, or not a record (a crash
                     mid-write before writes were durable; a hand edit). It is not idle: the
                     probe rebuilds it from what runs when that is unambiguous (one model
                     unit active, the one the front door's upstream names, answering on the
                     upstream's port; or no model unit and a front door with no model), keeps
                     the unreadable bytes beside it (`<record>.unreadable`), and otherwise
                     says "cannot repair" with what it found.
  frontdoor_disagrees the upstream file is missing, unreadable, or sends elsewhere than the
                     record's active model (another port or model, or "switching" / "idle").
  stale_hold         the hold file (503 "switching") is there while no switch holds the lock.
  stale_preswitch    the upstream kept from before a switch (`.before-switch`) outlived it:
                     the boot unit would put an old upstream back at the next boot.

A switch in progress is never touched: the probe checks nothing while the switch lock or a
fresh switch marker holds it (probe.switch_check), and repairs only while it holds the switch
lock itself (taken without waiting: a switch that begins meanwhile wins, and the probe tries
again next run). The front door is repaired only while the record's active model is healthy
(this run's probe passed): its upstream written from the record and nginx checked and
reloaded through FrontDoor.point (the cutover's own code), which also removes the hold and the
`.before-switch` copy. Otherwise the fault is reported, never an ok.
"""

import contextlib
import json
import os

try:
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import record as records
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
        SERVING,
        SETTLE_CONFIRMATIONS,
        FrontDoor,
        FrontDoorError,
        parse_upstream,
    )
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.listener import (
        url_endpoint,
    )
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.switch_lock import (
        SwitchBusyError,
        switch_lock,
    )
except ImportError:  # on the host: shipped beside probe.py by vllm_service
    import record as records  # type: ignore[no-redef]
    from frontdoor import (  # type: ignore[no-redef]
        SERVING,
        SETTLE_CONFIRMATIONS,
        FrontDoor,
        FrontDoorError,
        parse_upstream,
    )
    from listener import url_endpoint  # type: ignore[no-redef]
    from switch_lock import SwitchBusyError, switch_lock  # type: ignore[no-redef]

RECORD_UNREADABLE = "record_unreadable"
FRONTDOOR_DISAGREES = "frontdoor_disagrees"
STALE_HOLD = "stale_hold"
STALE_PRESWITCH = "stale_preswitch"
# A model's unit is vllm-<model>.service (its owner: record.unit_name); the product's own
# units are vllm-fleet-*.
UNIT_PREFIX, UNIT_SUFFIX, OWN_PREFIX = records.UNIT_PREFIX, records.UNIT_SUFFIX, "vllm-fleet-"
# Who holds the switch lock while the probe mends (switch_lock.describe says it to a waiter).
LOCK_HOLDER = "none (the probe mending the front door or the record)"
UNREADABLE_SUFFIX = ".unreadable"
READ_LIMIT = 16 * 1024 * 1024


class Found:
    """A fault: its name and what was seen."""

    def __init__(self, name, text):
        self.name = name
        self.text = text


def read_record(path):
    """(record, None) for a readable record ({} when there is none: no model deployed), or
    (None, Found) naming what is wrong with it: zero-length, not JSON, not a record."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(READ_LIMIT)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return None, Found(RECORD_UNREADABLE, f"the deployment record {path} cannot be read: "
                                              f"{exc.strerror or exc}")
    why = ""
    if not raw.strip():
        why = f"is empty ({len(raw)} bytes)"
    else:
        try:
            data = json.loads(raw)
        except ValueError as exc:
            why = f"is not JSON ({exc}; {len(raw)} bytes)"
        else:
            active = data.get("active") if isinstance(data, dict) else None
            if not isinstance(data, dict) or not isinstance(active, (dict, type(None))):
                why = f"is not a deployment record (JSON {type(data).__name__})"
    if why:
        return None, Found(RECORD_UNREADABLE, f"the deployment record {path} {why}")
    return data, None


def model_units(run_command):
    """(the model units systemd has active, sorted, error)."""
    rc, out, err = run_command(["systemctl", "list-units", "--type=service", "--state=active",
                                "--no-legend", "--plain", UNIT_PREFIX + "*" + UNIT_SUFFIX])
    if rc != 0:
        return None, f"systemctl list-units failed (rc={rc}): {(err or out).strip()}"
    names = [line.split()[0] for line in out.splitlines() if line.split()]
    return sorted(n for n in names if n.endswith(UNIT_SUFFIX) and not n.startswith(OWN_PREFIX)
                  ), ""


def describe_upstream(path, upstream):
    if upstream is None:
        return f"{path} is missing, empty or not the front door's upstream"
    if upstream["state"] == SERVING:
        return (f"{path} sends to {upstream['model'] or '?'} on "
                f"{upstream['host']}:{upstream['port']}")
    return f"{path} says {upstream['state']} (no model)"


def served_names(url, request, timeout):
    res = request("GET", url.rstrip("/") + "/v1/models", timeout=timeout)
    try:
        data = json.loads(res.body).get("data") if res.status == 200 else None  # noqa: PLR2004
    except (ValueError, AttributeError):
        data = None
    return [m.get("id") for m in data or [] if isinstance(m, dict) and m.get("id")]


def rebuild_record(upstream_file, run_command, request, timeout):
    """(record, found): the record as the host runs it, or None when that is ambiguous;
    `found` says what the host runs (front door and units) either way."""
    upstream = parse_upstream(_read_text(upstream_file)) if upstream_file else None
    units, error = model_units(run_command)
    found = ("front door: " + (describe_upstream(upstream_file, upstream) if upstream_file
                               else "not known to the probe")
             + "; model units active: " + (error or ", ".join(units or []) or "none"))
    if units is None:
        return None, found
    if upstream is not None and upstream["state"] != SERVING and not units:
        return records.empty(), found  # nothing serves: the record says so
    if upstream is None or upstream["state"] != SERVING or not upstream["model"]:
        return None, found
    unit = records.unit_name(upstream["model"])
    if units != [unit]:
        return None, found + f" (wanted {unit} alone)"
    url = f"http://{upstream['host']}:{upstream['port']}"
    names = served_names(url, request, timeout)
    if not names:
        return None, found + f"; {url}/v1/models lists no model"
    active = {"model": upstream["model"], "unit": unit, "port": upstream["port"], "url": url,
              "served_model_name": names[0]}
    return dict(records.empty(), active=active), found + f"; {url} serves {names[0]}"


def repair_record(path, rebuilt, why, wall, lock):
    """Keep the unreadable bytes beside the record, write the rebuilt one (under the switch
    lock, taken without waiting). Returns None, or why it was not written."""
    try:
        with _locked(lock):
            with contextlib.suppress(OSError), open(path, "rb") as handle:
                raw = handle.read(READ_LIMIT)
                if raw.strip():
                    records.write_atomic(path + UNREADABLE_SUFFIX, raw.decode("utf-8", "replace"),
                                         mode=0o600, prefix=".vllm_fleet.")
            stamp = records.now_iso(wall)
            records.write(path, dict(rebuilt, repaired={"by": "vllm-fleet-probe", "at": stamp,
                                                        "why": why}))
    except SwitchBusyError as exc:
        return f"not written: {exc.msg}"
    except OSError as exc:
        return f"writing it failed: {exc.strerror or exc}"
    return None


def frontdoor_faults(door, active):
    """[Found] where the front door disagrees with the record's active model (none: agrees)."""
    upstream = parse_upstream(door.current())
    _address, port = url_endpoint(active.get("url") or "")
    port = active.get("port") or port
    model = active.get("model")
    faults = []
    if (upstream is None or upstream["state"] != SERVING or upstream["port"] != int(port or 0)
            or upstream["model"] != model):
        seen = describe_upstream(door.upstream_file, upstream)
        faults.append(Found(FRONTDOOR_DISAGREES, (
            f"the front door disagrees with the record: {seen}; the record's active model is "
            f"{model} on port {port}")))
    if door.holding():
        faults.append(Found(STALE_HOLD, (f"the hold file {door.hold_file} is there (every "
                                         "request answered 503 switching) while no switch "
                                         "holds the switch lock: a switch that died")))
    if os.path.exists(door.before_file):
        faults.append(Found(STALE_PRESWITCH, (
            f"{door.before_file} outlived its switch (the next boot would put that upstream "
            "back)")))
    return faults


def repair_frontdoor(door, active, lock):
    """Point the front door at the record's active model (FrontDoor.point: the upstream
    written, nginx checked and reloaded, the hold and the `.before-switch` copy gone, the
    front door seen serving it). Returns None, or why it was not repaired."""
    _address, port = url_endpoint(active.get("url") or "")
    try:
        with _locked(lock):
            door.point(int(active.get("port") or port), active["model"],
                       active["served_model_name"])
    except SwitchBusyError as exc:
        return f"not repaired now: {exc.msg}"
    except FrontDoorError as exc:
        return f"the repair failed: {exc.msg}"
    except OSError as exc:
        return f"the repair failed: {exc.strerror or exc}"
    return None


@contextlib.contextmanager
def _locked(lock):
    if not lock:
        yield
        return
    with switch_lock(lock, LOCK_HOLDER, 0):
        yield


def _read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(READ_LIMIT)
    except OSError:
        return None


def door_of(settings, run_command, request):
    """The FrontDoor the probe mends, from its settings (None: the probe has none)."""
    spec = settings.frontdoor
    if not spec or not spec.get("upstream_file"):
        return None
    return FrontDoor(run_command, spec["upstream_file"], spec.get("url") or "http://127.0.0.1",
                     test_cmd=spec.get("test_cmd") or ("nginx", "-t"),
                     reload_cmd=spec.get("reload_cmd") or ("systemctl", "reload", "nginx"),
                     request=request, key_file=spec.get("key_file"),
                     confirmations=SETTLE_CONFIRMATIONS,
                     hold_file=spec.get("hold_file"), warm_file=spec.get("warm_file"))
