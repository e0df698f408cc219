# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""hf_download against a Hub that answers 429 with its rate-limit reset (issue 34, 4(e)).

The lab server (lab/hub_server.py, rate_limit_file / rate_limit_api) answers as the Hub
does when a quota is spent: 429 with the IETF ``RateLimit: "<bucket>";r=0;t=<seconds>`` and
``RateLimit-Policy: "fixed window";"<bucket>";q=...;w=300`` headers
(huggingface/hub-docs docs/hub/rate-limits.md, "HTTP Headers"; the format is the one
huggingface_hub.utils.parse_ratelimit_headers reads). The downloader waits the reset + 1 s
(as huggingface_hub's http_backoff does, utils/_http.py), spending no retry, up to
rate_limit_wait_max.
"""

import json
import threading
import time

import pytest

pytest.importorskip("huggingface_hub")

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.progress import progress_line
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import (
    hub_calls,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.hf_download import (
    PARTIAL_DIR,
    DownloadError,
)

SMALL = "org/small"
SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"


class FakeTime:
    """An injected sleep that records its calls and moves the injected clock on."""

    def __init__(self, progress=None):
        self.now = 1000.0
        self.sleeps = []
        self.lock = threading.Lock()
        self.progress = progress  # a progress file to read at each sleep
        self.seen = []

    def sleep(self, seconds):
        with self.lock:
            if self.progress is not None:
                self.seen.append(json.loads(self.progress.read_text()).get("rate_limited"))
            self.sleeps.append(seconds)
            self.now += seconds

    def clock(self):
        return self.now


def _verified(local, hub, repo=SMALL):
    manifest = json.loads((local / ".vllm-fleet-manifest.json").read_text())
    assert sorted(manifest["files"]) == sorted(hub.sizes[repo])
    for path, size in hub.sizes[repo].items():
        assert (local / path).stat().st_size == size
        assert manifest["files"][path]["size"] == size


def _fired(hub, fault):
    return sum(1 for f in hub.stats()["faults_fired"] if f["fault"] == fault)


@pytest.mark.parametrize(("header", "said"), [
    ("ratelimit", 'RateLimit: "resolvers";r=0;t=40'),
    ("retry-after", "Retry-After: 40"),
])
def test_a_file_429_with_the_reset_is_waited_out_without_spending_a_retry(
    hub, download, tmp_path, header, said
):
    """Two 429s with reset 40 s on one shard: two waits of 41 s, no retry spent (retries=0
    would give up at the first backoff), the file fetched once and verified; while it waits
    the progress file names the header."""
    hub.faults(rate_limit_file={SHARD2: {"count": 2, "reset": 40, "header": header}})
    progress = tmp_path / "progress.json"
    fake = FakeTime(progress)
    local = tmp_path / "m"
    r = download(SMALL, local, retries=0, sleep=fake.sleep, clock=fake.clock,
                 progress_file=str(progress), progress_interval=3600)
    assert sum(fake.sleeps) == 82  # (40 + 1) twice
    assert max(fake.sleeps) <= hub_calls.RATE_LIMIT_SLICE_S
    assert r["rate_limit_waited_seconds"] == 82.0
    assert r["retries_used"] == 0
    assert _fired(hub, "rate_limit_file") == 2
    assert hub.stats()["requests"][f"{SMALL}/{SHARD2}"] == 1  # the body once, after the waits
    _verified(local, hub)
    assert {w["header"] for w in fake.seen} == {said}
    assert {(w["file"], w["wait_seconds"]) for w in fake.seen} == {(SHARD2, 41.0)}


def test_a_429_of_the_api_is_waited_out_too(hub, download, tmp_path):
    """model_info (the revision call) answered 429 "api";r=0;t=30 once."""
    hub.faults(rate_limit_api={"count": 1, "reset": 30})
    fake = FakeTime()
    local = tmp_path / "m"
    r = download(SMALL, local, retries=0, sleep=fake.sleep, clock=fake.clock)
    assert sum(fake.sleeps) == 31
    assert r["rate_limit_waited_seconds"] == 31.0
    assert r["retries_used"] == 0
    _verified(local, hub)


def test_a_429_without_a_reset_keeps_the_backoff(hub, download, tmp_path):
    """No RateLimit, no Retry-After: backed off like a 5xx, each try a retry spent."""
    hub.faults(rate_limit_file={SHARD2: {"count": 2, "header": "none"}})
    fake = FakeTime()
    r = download(SMALL, tmp_path / "m", retries=3, backoff=0.01, sleep=fake.sleep,
                 clock=fake.clock)
    assert fake.sleeps == [0.01, 0.02]
    assert r["retries_used"] == 2
    assert r["rate_limit_waited_seconds"] == 0.0


def test_a_reset_beyond_the_bound_fails_at_once_and_loses_nothing(hub, download, tmp_path):
    """t=900 against rate_limit_wait_max 600: no wait, the message names the header, the bound
    and the variable; not a byte of that file written; the file fetched before is kept and
    the next run fetches only the rest."""
    hub.faults(rate_limit_file={SHARD2: {"count": -1, "reset": 900}})
    fake = FakeTime()
    local = tmp_path / "m"
    with pytest.raises(DownloadError) as exc:
        # One worker, largest first: shard 1 (12 MiB) is complete when shard 2 meets the 429.
        download(SMALL, local, max_workers=1, sleep=fake.sleep, clock=fake.clock,
                 rate_limit_wait_max=600)
    msg = exc.value.msg
    assert fake.sleeps == []
    assert msg.startswith(f"{SHARD2} of {SMALL}: the Hub rate-limited this download (HTTP 429, "
                          'RateLimit: "resolvers";r=0;t=900: the window resets in 900 s)')
    assert "would take the time waited for rate limits to 901 s" in msg
    assert ("beyond rate_limit_wait_max 600 s (role variable "
            "model_download_rate_limit_wait_max_s)") in msg
    assert f"partial files are kept in {local / PARTIAL_DIR} for the next run to resume" in msg
    assert "no token was sent" in msg
    assert "\n" not in msg
    assert exc.value.details["rate_limit_reset_seconds"] == 900
    assert _fired(hub, "rate_limit_file") == 1  # failed at the first 429: no retry
    assert f"{SMALL}/{SHARD2}" not in hub.stats()["bytes_sent"]
    assert not list((local / PARTIAL_DIR).glob(SHARD2 + "*"))
    assert not (local / SHARD2).exists()
    assert (local / SHARD1).stat().st_size == hub.sizes[SMALL][SHARD1]

    hub.reset()
    r = download(SMALL, local, max_workers=1)
    total = sum(hub.sizes[SMALL].values())
    assert r["bytes_downloaded"] == total - hub.sizes[SMALL][SHARD1]
    assert f"{SMALL}/{SHARD1}" not in hub.stats()["bytes_sent"]
    _verified(local, hub)


def test_a_reset_of_the_api_beyond_the_bound_changes_nothing(hub, download, tmp_path):
    hub.faults(rate_limit_api={"count": -1, "reset": 250})
    fake = FakeTime()
    local = tmp_path / "m"
    with pytest.raises(DownloadError) as exc:
        download(SMALL, local, sleep=fake.sleep, clock=fake.clock, rate_limit_wait_max=120,
                 token="hf_x")  # noqa: S106 - a made-up token: a token was sent
    msg = exc.value.msg
    assert fake.sleeps == []
    assert msg.startswith(f"the Hub API for {SMALL}: the Hub rate-limited this download "
                          '(HTTP 429, RateLimit: "api";r=0;t=250: the window resets in 250 s)')
    assert "beyond rate_limit_wait_max 120 s" in msg
    assert "no token was sent" not in msg
    assert msg.endswith("nothing on disk was changed (partial files stay for the next run "
                        "to resume)")
    assert not (local / ".vllm-fleet-manifest.json").exists()


def test_a_real_wait_for_a_short_reset_then_verified_files(hub, download, tmp_path, wait_until):
    """The real server, the real clock: a 429 with t=3 waits about 4 s (3 + 1), the progress
    file says so while it waits, and the download completes with verified files."""
    hub.faults(rate_limit_file={SHARD2: {"count": 1, "reset": 3}})
    local = tmp_path / "m"
    progress = tmp_path / "progress.json"
    out = {}

    def run():
        try:
            out["r"] = download(SMALL, local, retries=0, progress_file=str(progress),
                                progress_interval=0.1)
        except Exception as e:  # noqa: BLE001 - handed to the test thread
            out["e"] = e

    t0 = time.monotonic()
    worker = threading.Thread(target=run)
    worker.start()

    def waiting():
        try:
            return json.loads(progress.read_text()).get("rate_limited")
        except (OSError, ValueError):
            return None

    wait_until(waiting, "the progress file to say the download waits for the reset")
    snap = json.loads(progress.read_text())
    assert snap["rate_limited"]["header"] == 'RateLimit: "resolvers";r=0;t=3'
    assert snap["rate_limited"]["file"] == SHARD2
    assert snap["rate_limit_waited_seconds"] == 4.0
    line = progress_line("download", snap)
    assert "rate-limited by the Hub, waiting " in line
    assert line.endswith('(RateLimit: "resolvers";r=0;t=3)')
    worker.join(60)
    elapsed = time.monotonic() - t0
    assert not worker.is_alive(), "the download did not end within 60 s"
    assert "e" not in out, out.get("e")
    r = out["r"]
    assert elapsed >= 4.0  # it really waited the reset + 1 s
    assert r["rate_limit_waited_seconds"] == 4.0
    assert r["retries_used"] == 0
    final = json.loads(progress.read_text())
    assert final["state"] == "done"
    assert "rate_limited" not in final
    assert progress_line("download", final).endswith(
        "waited 4 s for the Hub's rate limit, done")
    _verified(local, hub)
