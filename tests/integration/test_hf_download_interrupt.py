# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 4, Must show 2: SIGKILL half way through a large file, run again, resume inside it.

The Hub stops sending at half the file and holds the connection (its hold_after fault), so
the kill lands inside the file once every byte sent is on disk: no timing decides where.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.hf_download import CHUNK

ROOT = Path(__file__).resolve().parent.parent.parent
BIG = "org/big"
SHARD = "model.safetensors"

RUNNER = """
import json, sys
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.hf_download import (
    HfDownloader,
)
r = HfDownloader(repo_id=sys.argv[1], local_dir=sys.argv[2], endpoint=sys.argv[3],
                 margin_bytes=0, backoff=0.01).run()
print(json.dumps({k: r[k] for k in ("bytes_downloaded", "bytes_partial", "revision")}))
"""


def _run_download(hub, local, env):
    return subprocess.Popen(
        [sys.executable, "-c", RUNNER, BIG, str(local), hub.url],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigkill_half_way_then_resume_inside_the_file(hub, tmp_path, wait_until):
    size = hub.sizes[BIG][SHARD]
    key = f"{BIG}/{SHARD}"
    # Half the file in whole client reads (the downloader writes what it reads in CHUNKs).
    half = size // 2 // CHUNK * CHUNK
    env = dict(os.environ, PYTHONPATH=str(ROOT / "collections"), HF_HOME=str(tmp_path / "hf"))
    local = tmp_path / "m"
    partial_dir = local / ".cache/vllm-fleet/partial"
    hub.faults(hold_after={SHARD: {"bytes": half, "count": 1, "then": "drop"}})
    proc = _run_download(hub, local, env)

    def half_on_disk():
        assert proc.poll() is None, proc.communicate()
        shard = [p.stat().st_size for p in partial_dir.glob(f"{SHARD}.*.partial")]
        return shard == [half] and (local / "config.json").is_file()

    wait_until(half_on_disk, f"{half} bytes of {SHARD} on disk and config.json in place")
    assert hub.stats()["held"] == [key]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first_sent = hub.stats()["bytes_sent"][key]
    assert first_sent == half < size  # killed inside the file
    partials = list(partial_dir.glob("*.partial"))
    assert len(partials) == 1
    assert partials[0].name.startswith(f"{SHARD}.")
    kept = partials[0].stat().st_size
    assert kept == half

    hub.reset()
    proc = _run_download(hub, local, env)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    result = json.loads(out.splitlines()[-1])
    second_sent = hub.stats()["bytes_sent"][key]
    ratio = second_sent / size
    print(
        f"\ninterrupt: killed after {first_sent} of {size} bytes sent, {kept} on disk; "
        f"second run: {second_sent} bytes sent = {ratio:.3f} of the file"
    )
    assert ratio <= 0.6
    assert second_sent == size - kept  # resumed exactly where the partial ended
    assert result["bytes_partial"] == kept
    assert [r["range"] for r in hub.stats()["ranges"] if r["file"] == key] == [f"bytes={kept}-"]
    assert (local / SHARD).read_bytes() == (hub.root / BIG / SHARD).read_bytes()
    assert not list((local / ".cache").rglob("*.partial"))
    assert not list(local.rglob("*.incomplete"))
    manifest = json.loads((local / ".vllm-fleet-manifest.json").read_text())
    assert manifest["revision"] == result["revision"]
    assert manifest["files"][SHARD]["size"] == size
