# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""hf_download under server faults (issue 4, Must show 3), against lab/hub_server.py."""

import contextlib
import json
import re
import subprocess
import threading

import pytest

pytest.importorskip("huggingface_hub")

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import hf_download
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.hf_download import (
    DownloadError,
)

SMALL = "org/small"
SHARD2 = "model-00002-of-00002.safetensors"


def test_5xx_on_one_file_retries_with_backoff_then_names_the_file(hub, download, tmp_path):
    hub.faults(fail_file={SHARD2: {"count": -1, "status": 503}})
    sleeps = []
    local = tmp_path / "m"
    with pytest.raises(DownloadError) as exc:
        download(SMALL, local, retries=3, backoff=0.01, sleep=sleeps.append)
    msg = exc.value.msg
    assert SHARD2 in msg
    assert "giving up after 3 retries" in msg
    assert "503" in msg
    assert "\n" not in msg
    assert sleeps == [0.01, 0.02, 0.04]  # exponential
    assert hub.stats()["requests"].get(f"{SMALL}/{SHARD2}") is None  # 503 before any body
    assert sum(1 for f in hub.stats()["faults_fired"] if f["fault"] == "fail_file") == 4
    assert not (local / ".vllm-fleet-manifest.json").exists()  # nothing marked verified
    assert not (local / SHARD2).exists()


def test_transient_5xx_is_retried_and_succeeds(hub, download, tmp_path):
    # huggingface_hub alone fails the whole snapshot on one 503 of a body GET (lab notes 7).
    hub.faults(fail_file={SHARD2: {"count": 2, "status": 503}})
    r = download(SMALL, tmp_path / "m", retries=3)
    assert r["retries_used"] == 2
    assert (tmp_path / "m" / SHARD2).stat().st_size == hub.sizes[SMALL][SHARD2]


def test_revision_api_5xx_with_files_on_disk_is_not_ok(hub, download, tmp_path):
    local = tmp_path / "m"
    download(SMALL, local)
    (local / SHARD2).unlink()  # and one file missing, as after an interrupted run
    hub.reset()
    hub.faults(fail_revision={"count": -1, "status": 500})
    sleeps = []
    with pytest.raises(DownloadError) as exc:
        download(SMALL, local, retries=2, sleep=sleeps.append)
    assert "HTTP 500" in exc.value.msg
    assert "nothing on disk was trusted" in exc.value.msg
    assert len(sleeps) == 2
    with pytest.raises(DownloadError):
        download(
            SMALL,
            local,
            revision=json.loads((local / ".vllm-fleet-manifest.json").read_text())["revision"],
            retries=0,
        )


@pytest.mark.parametrize(
    ("repo", "rev", "pattern"),
    [
        ("org/nope", "main", r"^repository org/nope not found at .* \(HTTP 404\)"),
        ("org/small", "v9", r"^revision 'v9' not found in repository org/small .*\(HTTP 404\)"),
        ("org/gated", "main", r"^repository org/gated is gated \(HTTP 401 .*token"),
    ],
)
def test_not_found_and_gated_are_distinct_one_line_messages(
    hub, download, tmp_path, repo, rev, pattern
):
    with pytest.raises(DownloadError) as exc:
        download(repo, tmp_path / "m", revision=rev)
    assert re.search(pattern, exc.value.msg), exc.value.msg
    assert "\n" not in exc.value.msg
    assert "Traceback" not in exc.value.msg


@pytest.mark.parametrize("repo", ["org/small", "org/gated"])
def test_a_revoked_token_keeps_the_hubs_reason(hub, download, tmp_path, repo):
    """Issue 46 case 6: the Hub answers a revoked or mistyped token 401 "Invalid credentials
    in Authorization header" on every route; huggingface_hub raises RepositoryNotFoundError,
    and the message said "not found ... check repo_id", losing the Hub's reason."""
    hub.faults(revoked_tokens=["hf_revoked"])
    with pytest.raises(DownloadError) as exc:
        download(repo, tmp_path / "m", token="hf_revoked")  # noqa: S106
    assert re.search(rf"^the Hub at .* refused the token for {repo} \(HTTP 401: Invalid "
                     r"credentials in Authorization header\): check token / token_file$",
                     exc.value.msg), exc.value.msg
    assert hub.stats()["bytes_sent"] == {}


def test_gated_with_token_downloads(hub, download, tmp_path):
    r = download("org/gated", tmp_path / "m", token="hf_lab_token")  # noqa: S106
    assert r["bytes_downloaded"] == sum(hub.sizes["org/gated"].values())


def test_dropped_connection_resumes_inside_the_file(hub, download, tmp_path):
    shard = "model-00001-of-00002.safetensors"
    size = hub.sizes[SMALL][shard]
    hub.faults(drop_after={shard: {"bytes": 5_000_000, "count": 2}})
    r = download(SMALL, tmp_path / "m", allow_patterns=[shard])
    stats = hub.stats()
    ranges = [x["range"] for x in stats["ranges"] if x["file"].endswith(shard)]
    assert ranges[0] is None
    assert len(ranges) == 3
    assert all(x and x.startswith("bytes=") for x in ranges[1:])
    # every byte crossed the wire once (+ at most what was in flight when the socket dropped)
    assert size <= stats["bytes_sent"][f"{SMALL}/{shard}"] <= size + 2 * 1024 * 1024
    assert r["bytes_downloaded"] == size
    assert r["retries_used"] == 0  # progress each time: resumed at once, no backoff


def test_wrong_bytes_twice_fail_naming_the_file(hub, download, tmp_path, monkeypatch):
    orig = hf_download.HfDownloader.resolve

    def resolve_with_wrong_hash(self):
        sha, remote = orig(self)
        for rf in remote:
            if rf.path == "config.json":
                rf.blob_id = "0" * 40
        return sha, remote

    monkeypatch.setattr(hf_download.HfDownloader, "resolve", resolve_with_wrong_hash)
    with pytest.raises(DownloadError) as exc:
        download(SMALL, tmp_path / "m", allow_patterns=["*.json"])
    assert exc.value.msg.startswith("config.json failed verification twice")
    assert hub.stats()["requests"][f"{SMALL}/config.json"] == 2
    assert not (tmp_path / "m" / "config.json").exists()


@contextlib.contextmanager
def tmpfs(path, size):
    path.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {e}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_disk_preflight_fails_before_the_first_byte(hub, download, tmp_path):
    with tmpfs(tmp_path / "fs", "20m") as fs:
        with pytest.raises(DownloadError) as exc:
            download("org/big", fs / "m", margin_bytes=1024 * 1024)
        msg = exc.value.msg
        assert re.search(
            r"not enough disk space on .*/fs/m: need \d+ bytes \([\d.]+ GiB = "
            r"[\d.]+ GiB \+ margin [\d.]+ GiB\), free \d+ bytes \([\d.]+ GiB\); short by \d+ bytes",
            msg,
        ), msg
        need = sum(hub.sizes["org/big"].values()) + 1024 * 1024
        assert f"need {need} bytes" in msg
        assert hub.stats()["bytes_sent"] == {}


def test_enospc_mid_run_keeps_partials_and_resumes(hub, download, tmp_path, wait_until):
    total = sum(hub.sizes[SMALL].values())
    held = 3 * 1024 * 1024
    with tmpfs(tmp_path / "fs", "40m") as fs:
        local = fs / "m"
        partial_dir = local / ".cache/vllm-fleet/partial"
        hog = fs / "hog"
        # Both workers take a shard (largest first); the Hub holds each after 3 MiB.
        hub.faults(hold_after={"*.safetensors": {"bytes": held, "count": 2}})
        errors = []

        def first_run():
            try:
                download(SMALL, local, max_workers=2)
            except DownloadError as e:
                errors.append(e)

        run = threading.Thread(target=first_run)
        run.start()
        try:
            # Another writer eats the disk while the download is under way.
            wait_until(
                lambda: (
                    sorted(p.stat().st_size for p in partial_dir.rglob("*.partial")) == [held, held]
                ),
                "3 MiB of each shard on disk",
            )
            with contextlib.suppress(OSError), hog.open("wb", buffering=0) as f:
                while True:
                    f.write(b"\0" * (1024 * 1024))
        finally:
            hub.release()
            run.join()
        assert len(errors) == 1
        msg = errors[0].msg
        assert msg.startswith("no space left on device writing model-0000")
        assert "partial files are kept" in msg
        partials = list(partial_dir.rglob("*.partial"))
        kept = sum(p.stat().st_size for p in partials)
        assert kept == 2 * held
        print(f"\nENOSPC: {kept} bytes kept in {len(partials)} partial(s)")
        hog.unlink()
        hub.reset()
        r = download(SMALL, local)
        sent = sum(hub.stats()["bytes_sent"].values())
        assert r["bytes_partial"] == kept
        assert sent == total - kept
        assert not list(partial_dir.rglob("*.partial"))
