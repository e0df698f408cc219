# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 12, case 9: download edges that once survived a deliberate break of the code.

Each test here fails when the guard it names is removed from module_utils/download/hf_download.py:
a 200 answer to a Range request appended to the partial, a body longer than the Hub lists,
and the size check at the end of the run. The server is lab/hub_server.py with its
`ignore_range` and `extra_bytes` faults.
"""

import hashlib
import json
import re

import pytest

pytest.importorskip("huggingface_hub")

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import hf_download
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.hf_download import (
    DownloadError,
)

SMALL = "org/small"
SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"
EXTRA = 1000
DROP_AT = 5_000_000


def _partial(hub, local, rel):
    """Where hf_download keeps the partial of `rel` (named by the file's sha256)."""
    expected = hashlib.sha256((hub.root / SMALL / rel).read_bytes()).hexdigest()
    return local / ".cache" / "vllm-fleet" / "partial" / f"{rel}.{expected[:16]}.partial"


def test_a_200_answer_to_a_range_request_restarts_the_file_from_byte_0(hub, download, tmp_path):
    # The first GET drops after 5,000,000 bytes, so the client resumes with a Range
    # header; the server ignores it and sends the whole file with 200, as a server or
    # proxy without range support does. Appending that body to the partial would hold
    # the first 5,000,000 bytes twice.
    size = hub.sizes[SMALL][SHARD1]
    local = tmp_path / "m"
    progress = tmp_path / "progress.json"
    hub.faults(
        drop_after={SHARD1: {"bytes": DROP_AT, "count": 1}},
        ignore_range={SHARD1: {"count": -1}},
    )
    r = download(SMALL, local, allow_patterns=[SHARD1], progress_file=str(progress))
    stats = hub.stats()
    ranges = [x["range"] for x in stats["ranges"]]
    assert ranges[0] is None
    assert len(ranges) == 2
    resumed_at = int(re.fullmatch(r"bytes=(\d+)-", ranges[1]).group(1))
    assert 0 < resumed_at <= DROP_AT  # what the client had written when the socket dropped
    assert [f["fault"] for f in stats["faults_fired"]] == ["drop_after", "ignore_range"]
    assert stats["bytes_sent"][f"{SMALL}/{SHARD1}"] == DROP_AT + size
    assert (local / SHARD1).read_bytes() == (hub.root / SMALL / SHARD1).read_bytes()
    assert r["files_refetched"] == []  # right the first time: no hash mismatch, no refetch
    assert r["bytes_downloaded"] == resumed_at + size  # written to disk, both answers
    assert r["retries_used"] == 0
    final = json.loads(progress.read_text())
    assert final["state"] == "done"
    assert final["bytes_done"] == final["bytes_total"] == size  # the restart was not counted twice
    assert not _partial(hub, local, SHARD1).exists()


@pytest.mark.parametrize(
    ("announce", "resume", "found"),
    [
        (True, False, "the server sends {n} (Content-Length)"),
        (True, True, "the server sends {n} (Content-Range bytes {half}-{last}/{n})"),
        (False, False, "the server sent at least {n} (no Content-Length)"),
    ],
    ids=["content-length", "content-range", "no-length"],
)
def test_more_bytes_than_the_hub_lists_fail_naming_the_file_and_both_sizes(
    hub, download, tmp_path, announce, resume, found
):
    size = hub.sizes[SMALL][SHARD2]
    local = tmp_path / "m"
    part = _partial(hub, local, SHARD2)
    if resume:  # a run killed half way left the right first half
        part.parent.mkdir(parents=True)
        part.write_bytes((hub.root / SMALL / SHARD2).read_bytes()[: size // 2])
    hub.faults(extra_bytes={SHARD2: {"bytes": EXTRA, "count": -1, "announce": announce}})
    with pytest.raises(DownloadError) as exc:
        download(SMALL, local, allow_patterns=[SHARD2])
    msg = exc.value.msg
    # Announced sizes are refused before a byte is written; an unannounced body is counted
    # as it streams and refused at the first chunk that goes past the listed size.
    n = size + EXTRA
    assert msg.startswith(f"{SHARD2}: the Hub lists {size} bytes, ")
    assert found.format(n=n, half=size // 2, last=n - 1) in msg
    assert "\n" not in msg
    assert hub.stats()["requests"][f"{SMALL}/{SHARD2}"] == 1  # the same server, the same bytes
    assert not (local / SHARD2).exists()
    assert not (local / ".vllm-fleet-manifest.json").exists()
    if resume:  # the partial is the listed file's first half: kept for a later run
        assert part.stat().st_size == size // 2
    else:
        assert not part.exists()


@pytest.mark.parametrize("change", ["truncate", "remove"])
def test_a_file_another_writer_changes_during_the_run_is_never_reported_ok(
    hub, download, tmp_path, monkeypatch, change
):
    # First run: everything verified and recorded. Then SHARD2 goes missing, so the second
    # run fetches it; while it does, another writer truncates or removes config.json, which
    # the manifest vouched for at the start of the run. Only the size check at the end of
    # the run sees that.
    local = tmp_path / "m"
    download(SMALL, local)
    manifest_before = (local / ".vllm-fleet-manifest.json").read_bytes()
    (local / SHARD2).unlink()
    config = local / "config.json"
    orig = hf_download.HfDownloader._fetch_verified

    def fetch_while_another_writer_acts(self, session, sha, rf, progress):
        if change == "truncate":
            config.write_bytes(b"{}\n")
        else:
            config.unlink()
        return orig(self, session, sha, rf, progress)

    monkeypatch.setattr(
        hf_download.HfDownloader, "_fetch_verified", fetch_while_another_writer_acts
    )
    hub.reset()
    with pytest.raises(DownloadError) as exc:
        download(SMALL, local)
    listed = hub.sizes[SMALL]["config.json"]
    if change == "truncate":
        assert exc.value.msg == (
            f"config.json is 3 bytes on disk at the end of the run, the Hub lists {listed}; "
            "something else changed it: run again to fetch it"
        )
    else:
        assert exc.value.msg == (
            f"config.json is missing from {local} at the end of the run (the Hub lists "
            f"{listed} bytes); something else removed it: run again to fetch it"
        )
    assert hub.stats()["requests"] == {f"{SMALL}/{SHARD2}": 1}
    assert (local / SHARD2).read_bytes() == (hub.root / SMALL / SHARD2).read_bytes()
    # The record still describes the first run: it never vouches for the changed file.
    assert (local / ".vllm-fleet-manifest.json").read_bytes() == manifest_before
