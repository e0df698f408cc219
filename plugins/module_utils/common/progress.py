# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""One line of progress for a long job, from the JSON its module writes on the host.

The download (hf_download's progress file) and a model's start (the cutover's
progress file) run as asynchronous jobs on the host; the controller's
async_follow action reads their progress file every interval and prints the
line these functions make, so a 540 GB download or a 36-minute load never
looks like a hang.
"""

import time

GIB = 1024**3
MB = 1000**2
# A start's log silent this long is worth saying (its startup_stall_s ends it).
SILENT_SHOWN_S = 30


def _duration(seconds):
    seconds = int(seconds)
    if seconds < 90:  # noqa: PLR2004 - under a minute and a half, say seconds
        return f"{seconds} s"
    minutes = round(seconds / 60)
    if minutes < 90:  # noqa: PLR2004
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def download_line(data):
    """'12.35 GiB of 540.00 GiB (2.3 %), 8 of 119 files, 410.2 MB/s, about 21 min left'."""
    holder = data.get("waiting_for")
    if data.get("state") == "waiting" and isinstance(holder, dict):
        # Another host stages this repo on the shared volume
        # (module_utils/download/models_volume.py).
        since = holder.get("since")
        held = (f", held since {time.strftime('%H:%M:%S', time.gmtime(since))} UTC"
                if isinstance(since, (int, float)) else "")
        lease = data.get("lease_s")
        return (f"waiting for the lease on the shared models volume: {holder.get('host')} "
                f"(pid {holder.get('pid')}){held} stages this repo; waited "
                f"{_duration(data.get('waited_s') or 0)}"
                + (f"; a lease left unrenewed for {_duration(lease)} is taken over"
                   if lease else ""))
    done, total = int(data.get("bytes_done") or 0), int(data.get("bytes_total") or 0)
    share = f" ({100.0 * done / total:.1f} %)" if total else ""
    parts = [f"{done / GIB:.2f} GiB of {total / GIB:.2f} GiB{share}"]
    if data.get("files_total") is not None:
        parts.append(f"{data.get('files_done', 0)} of {data['files_total']} files")
    rate = data.get("rate_bytes_per_s")
    if rate:
        parts.append(f"{rate / MB:.1f} MB/s")
    eta = data.get("eta_seconds")
    if eta is not None and done < total:
        parts.append(f"about {_duration(eta)} left")
    limited = data.get("rate_limited")
    if isinstance(limited, dict):
        left = limited.get("left_seconds", limited.get("wait_seconds", 0))
        parts.append(f"rate-limited by the Hub, waiting {_duration(left)} "
                     f"({limited.get('header') or 'reset'})")
    waited = data.get("rate_limit_waited_seconds") or 0
    if waited and not isinstance(limited, dict):
        parts.append(f"waited {_duration(waited)} for the Hub's rate limit")
    retries = data.get("retries") or {}
    if retries:
        parts.append("retries: " + ", ".join(f"{path} x{count}"
                                             for path, count in sorted(retries.items())))
    state = data.get("state")
    if state and state != "downloading":
        parts.append(state)
    return ", ".join(parts)


def start_line(data):
    """'starting tiny_gqa (green): 35 s of 600 s; last log line: Loading weights took 0.12 s'."""
    what = data.get("model") or "the model"
    role = f" ({data['role']})" if data.get("role") else ""
    elapsed, limit = data.get("elapsed_s"), data.get("limit_s")
    head = f"{data.get('phase') or 'starting'} {what}{role}"
    if elapsed is not None:
        head += f": {_duration(elapsed)}" + (f" of {_duration(limit)}" if limit else "")
    silent = data.get("silent_s")
    if silent is not None and silent >= SILENT_SHOWN_S:
        head += f", silent for {_duration(silent)}"
    last = (data.get("last_line") or "").strip()
    return head + (f"; last log line: {last[:160]}" if last else "")


LINES = {"download": download_line, "start": start_line}


def progress_line(kind, data):
    """The line for `kind` (download | start); None when there is nothing to say yet."""
    if not isinstance(data, dict) or not data:
        return None
    return LINES[kind](data)
