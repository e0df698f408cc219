# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""hf_download against lab/hub_server.py: fetch, verify, manifest, check mode, lock, progress."""

import contextlib
import hashlib
import json
import os
import threading

import pytest

pytest.importorskip("huggingface_hub")

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import hf_download
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.hf_download import (
    DownloadError,
)

SMALL = "org/small"
SHARD1 = "model-00001-of-00002.safetensors"
MiB = 1024 * 1024


def _same_bytes(hub, repo, local, rel):
    return (local / rel).read_bytes() == (hub.root / repo / rel).read_bytes()


def test_check_mode_reports_bytes_and_writes_nothing(hub, download, tmp_path):
    local = tmp_path / "m"
    r = download(SMALL, local, check_mode=True)
    assert r["changed"] is True
    assert r["bytes_to_download"] == sum(hub.sizes[SMALL].values())
    assert r["bytes_downloaded"] == 0
    assert not local.exists()
    assert hub.stats()["bytes_sent"] == {}


def test_download_verifies_and_second_run_trusts_manifest(hub, download, tmp_path):
    local = tmp_path / "m"
    total = sum(hub.sizes[SMALL].values())
    r1 = download(SMALL, local, revision="v1.0")
    assert r1["changed"] is True
    assert r1["bytes_downloaded"] == total == r1["bytes_total"]
    assert r1["files"] == len(hub.sizes[SMALL])
    for rel in hub.sizes[SMALL]:
        assert _same_bytes(hub, SMALL, local, rel)
    manifest = json.loads((local / ".vllm-fleet-manifest.json").read_text())
    assert manifest["revision"] == r1["revision"]
    assert len(r1["revision"]) == 40
    assert manifest["revision_requested"] == "v1.0"
    shard = "model-00001-of-00002.safetensors"
    want = hashlib.sha256((hub.root / SMALL / shard).read_bytes()).hexdigest()
    assert manifest["files"][shard]["hash"] == want
    assert manifest["files"][shard]["algorithm"] == "sha256"
    assert manifest["files"]["config.json"]["algorithm"] == "git-sha1"
    assert not list((local / ".cache" / "vllm-fleet" / "partial").rglob("*.partial"))

    # Second run: nothing fetched; files not re-hashed (hash_file is never called).
    calls = []
    orig = hf_download.hash_file
    hf_download.hash_file = lambda *a, **k: calls.append(a) or orig(*a, **k)
    try:
        r2 = download(SMALL, local)
    finally:
        hf_download.hash_file = orig
    assert r2["changed"] is False
    assert r2["bytes_downloaded"] == 0
    assert r2["bytes_verified_before"] == total
    assert calls == []
    sent_after_first = sum(hub.stats()["bytes_sent"].values())
    assert sent_after_first == total


def test_patterns_filter_files(hub, download, tmp_path):
    r = download(
        SMALL,
        tmp_path / "m",
        allow_patterns=["*.json", "*.safetensors"],
        ignore_patterns=["model-00002*"],
    )
    got = sorted(
        p.relative_to(tmp_path / "m").as_posix()
        for p in (tmp_path / "m").rglob("*")
        if p.is_file() and ".cache" not in p.parts and p.name != ".vllm-fleet-manifest.json"
    )
    assert got == ["config.json", "model-00001-of-00002.safetensors", "tokenizer.json"]
    assert r["files"] == 3


def test_corrupted_byte_is_found_and_refetched(hub, download, tmp_path):
    local = tmp_path / "m"
    download(SMALL, local)
    shard = local / "model-00002-of-00002.safetensors"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    hub.reset()
    r = download(SMALL, local)
    assert r["files_mismatched"] == ["model-00002-of-00002.safetensors"]
    assert r["changed"] is True
    assert r["bytes_downloaded"] == hub.sizes[SMALL]["model-00002-of-00002.safetensors"]
    assert _same_bytes(hub, SMALL, local, "model-00002-of-00002.safetensors")


def test_corruption_with_preserved_mtime_needs_reverify(hub, download, tmp_path):
    local = tmp_path / "m"
    download(SMALL, local)
    cfg = local / "config.json"
    st = cfg.stat()
    data = bytearray(cfg.read_bytes())
    data[0] ^= 0x20
    cfg.write_bytes(bytes(data))
    os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert download(SMALL, local)["changed"] is False  # trusted by size+mtime: documented
    r = download(SMALL, local, reverify=True)
    assert r["files_mismatched"] == ["config.json"]
    assert _same_bytes(hub, SMALL, local, "config.json")


def test_wrong_partial_fails_hash_and_is_refetched_whole(hub, download, tmp_path):
    # A partial whose bytes are wrong is resumed, fails hashing, is refetched whole and passes.
    local = tmp_path / "m"
    r0 = download(SMALL, local, check_mode=True)
    rf_name = "original/consolidated.pth"
    size = hub.sizes[SMALL][rf_name]
    part_dir = local / ".cache" / "vllm-fleet" / "partial" / "original"
    part_dir.mkdir(parents=True)
    expected = hashlib.sha256((hub.root / SMALL / rf_name).read_bytes()).hexdigest()
    (part_dir / f"consolidated.pth.{expected[:16]}.partial").write_bytes(b"\0" * (size // 2))
    r = download(SMALL, local)
    assert r0["bytes_partial"] == 0
    assert r["bytes_partial"] == size // 2
    assert r["files_refetched"] == [rf_name]
    assert _same_bytes(hub, SMALL, local, rf_name)


def test_orphans_of_huggingface_hub_are_removed(hub, download, tmp_path):
    local = tmp_path / "m"
    orphan = local / ".cache" / "huggingface" / "download" / "model.safetensors.abcd1234.incomplete"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"x" * 1000)
    hf_home = tmp_path / "hf"
    blob_orphan = hf_home / "hub" / "models--org--small" / "blobs" / "deadbeef.incomplete"
    blob_orphan.parent.mkdir(parents=True)
    blob_orphan.write_bytes(b"y")
    stale = local / ".cache" / "vllm-fleet" / "partial" / "old.bin.0123456789abcdef.partial"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"z")
    r = download(SMALL, local, hf_home=str(hf_home), allow_patterns=["*.json"])
    assert sorted(r["orphans_removed"]) == sorted([str(orphan), str(blob_orphan), str(stale)])
    assert not orphan.exists()
    assert not blob_orphan.exists()
    assert not stale.exists()


def _blocked_on(path):
    """Whether some open file waits for the flock on `path` (a "->" line of /proc/locks)."""
    st = os.stat(path)
    dev_ino = "%02x:%02x:%d" % (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    with open("/proc/locks") as f:
        return any(line.split()[1] == "->" and dev_ino in line.split() for line in f)


def test_second_concurrent_run_waits_and_fetches_nothing(hub, download, tmp_path, wait_until):
    # The Hub holds the first run half way through a shard, so it holds the lock; the
    # second run starts then, and the first goes on once the second waits on the lock.
    local = tmp_path / "m"
    hub.faults(hold_after={SHARD1: {"bytes": 4 * MiB, "count": 1}})
    results = {}
    first = threading.Thread(target=lambda: results.update(a=download(SMALL, local)))
    first.start()
    wait_until(lambda: hub.stats()["held"] == [f"{SMALL}/{SHARD1}"], "the first run held")
    second = threading.Thread(target=lambda: results.update(b=download(SMALL, local)))
    second.start()
    wait_until(lambda: _blocked_on(local / hf_download.LOCK_NAME), "the second run to wait")
    hub.release()
    first.join()
    second.join()
    total = sum(hub.sizes[SMALL].values())
    assert results["a"]["bytes_downloaded"] == total
    assert results["b"]["bytes_downloaded"] == 0
    assert results["b"]["changed"] is False
    assert results["b"]["lock_waited_seconds"] > 0
    assert sum(hub.stats()["bytes_sent"].values()) == total


def test_progress_file_reports_done_total_rate_eta(hub, download, tmp_path, wait_until):
    # The Hub holds SHARD1 after 6 MiB; every other file completes. The progress file then
    # shows a state that lasts until the test lets the shard go on.
    local = tmp_path / "m"
    progress = tmp_path / "progress.json"
    total = sum(hub.sizes[SMALL].values())
    held_at = total - hub.sizes[SMALL][SHARD1] + 6 * MiB
    hub.faults(hold_after={SHARD1: {"bytes": 6 * MiB, "count": 1}})
    results = {}
    run = threading.Thread(
        target=lambda: results.update(
            r=download(
                SMALL, local, progress_file=str(progress), progress_interval=0.1, max_workers=2
            )
        )
    )
    run.start()

    def snapshot():
        with contextlib.suppress(OSError, ValueError):
            return json.loads(progress.read_text())
        return {}

    def held_state(snap):
        files = len(hub.sizes[SMALL])
        return (snap.get("bytes_done"), snap.get("files_done")) == (held_at, files - 1)

    try:
        wait_until(lambda: held_state(snapshot()), f"{held_at} bytes and all files but one done")
        middle = snapshot()
    finally:
        hub.release()
        run.join()
    assert middle["state"] == "downloading"
    assert middle["bytes_total"] == total
    assert held_state(middle)
    assert middle["files_total"] == len(hub.sizes[SMALL])
    assert middle["rate_bytes_per_s"] > 0
    # bytes left at the rate so far (the file's rate is rounded down to whole bytes/s)
    assert abs(middle["eta_seconds"] - (total - held_at) / middle["rate_bytes_per_s"]) <= 1
    final = json.loads(progress.read_text())
    assert final["state"] == "done"
    assert final["bytes_done"] == final["bytes_total"] == total
    assert results["r"]["bytes_downloaded"] == total


def test_empty_pattern_match_is_an_error(hub, download, tmp_path):
    with pytest.raises(DownloadError, match="no file of org/small"):
        download(SMALL, tmp_path / "m", allow_patterns=["*.gguf"])
