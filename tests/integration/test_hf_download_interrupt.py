"""Issue 4, Must show 2: SIGKILL half way through a large file, run again, resume inside it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")

ROOT = Path(__file__).resolve().parent.parent.parent
BIG = "org/big"
SHARD = "model.safetensors"

RUNNER = """
import json, sys
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.hf_download import HfDownloader
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


def test_sigkill_half_way_then_resume_inside_the_file(hub, tmp_path):
    size = hub.sizes[BIG][SHARD]
    key = f"{BIG}/{SHARD}"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "collections"), HF_HOME=str(tmp_path / "hf"))
    local = tmp_path / "m"
    hub.faults(throttle_bps=32 * 1024 * 1024)  # 48 MiB in ~1.5 s: room to kill mid-file
    proc = _run_download(hub, local, env)
    deadline = time.monotonic() + 30
    while hub.stats()["bytes_sent"].get(key, 0) < size // 2:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first_sent = hub.stats()["bytes_sent"][key]
    assert first_sent < size  # killed inside the file
    partials = list((local / ".cache/vllm-fleet/partial").glob("*.partial"))
    assert len(partials) == 1
    kept = partials[0].stat().st_size

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
