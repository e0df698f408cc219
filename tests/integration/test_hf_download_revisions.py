# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Revisions that cannot mix (issue 12, case 4), against the lab Hub with the real client.

org/revs at main has two shards, model.safetensors.index.json and config.json; its revision
v2 has one model.safetensors and config.json (tests/integration/conftest.py). Downloaded into
one folder, the index of main would lead a loader to main's shards while the record says v2.
With one folder per commit each revision's folder holds exactly its own files; the old one
stays whole until retention removes it, and only what the tool wrote.
"""

import json
import os

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.hf_download import (
    MANIFEST_NAME,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.revisions import prune
from huggingface_hub import HfApi

REPO = "org/revs"
MAIN_FILES = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
              "model.safetensors.index.json", "config.json"}
V2_FILES = {"model.safetensors", "config.json"}


def files_in(folder):
    """The model's files in a folder (the tool's manifest and state folder aside)."""
    return {
        os.path.relpath(os.path.join(d, f), folder)
        for d, dirs, names in os.walk(folder)
        for f in names
        if not os.path.relpath(d, folder).startswith(".cache") and f != MANIFEST_NAME
    }


def shas(hub):
    api = HfApi(endpoint=hub.url)
    return api.model_info(REPO, revision="main").sha, api.model_info(REPO, revision="v2").sha


def test_each_commit_gets_its_own_folder_and_the_old_one_stays_whole(hub, download, tmp_path):
    base = tmp_path / "org" / "revs"
    main_sha, v2_sha = shas(hub)
    first = download(REPO, base, revision="main", snapshots=True)
    assert first["model_dir"] == str(base / "snapshots" / main_sha)
    assert files_in(first["model_dir"]) == MAIN_FILES

    # The plan for v2, before any byte: all of v2 is to fetch, main's folder counts for nothing.
    plan = download(REPO, base, revision="v2", snapshots=True, check_mode=True)
    v2_bytes = sum(hub.revision_sizes[REPO]["v2"].values())
    assert (plan["revision"], plan["bytes_to_download"]) == (v2_sha, v2_bytes)
    assert not os.path.exists(base / "snapshots" / v2_sha)  # check mode writes nothing

    second = download(REPO, base, revision="v2", snapshots=True)
    v2_dir = base / "snapshots" / v2_sha
    assert second["model_dir"] == str(v2_dir)
    assert files_in(v2_dir) == V2_FILES  # no index, no shards of main: nothing to mix up
    assert json.loads((v2_dir / "config.json").read_text())["revision"] == "v2"
    assert files_in(first["model_dir"]) == MAIN_FILES  # the serving revision is untouched
    assert json.loads((base / "snapshots" / main_sha / MANIFEST_NAME).read_text())[
        "revision"] == main_sha

    again = download(REPO, base, revision="v2", snapshots=True)
    assert (again["changed"], again["bytes_downloaded"], again["files_to_fetch"]) == (False, 0, [])


def test_retention_removes_the_old_revision_and_nothing_it_did_not_write(hub, download,
                                                                         tmp_path):
    base = tmp_path / "revs"
    main_sha, v2_sha = shas(hub)
    download(REPO, base, revision="main", snapshots=True)
    download(REPO, base, revision="v2", snapshots=True)
    foreign = base / "snapshots" / "copied-by-hand"
    foreign.mkdir()
    (foreign / "model.safetensors").write_bytes(b"not ours")
    (base / "snapshots" / main_sha / "operator-notes.txt").write_text("mine")

    result = prune(str(base), keep=1, protect=[v2_sha])
    main_bytes = sum(hub.sizes[REPO].values())
    assert [r["commit"] for r in result["removed"]] == [main_sha]
    assert result["bytes_freed"] == main_bytes
    assert files_in(base / "snapshots" / v2_sha) == V2_FILES
    assert os.listdir(base / "snapshots" / main_sha) == ["operator-notes.txt"]
    assert os.listdir(foreign) == ["model.safetensors"]
    assert result["unmanaged"] == [str(foreign)]


def test_files_of_the_flat_layout_are_linked_not_fetched_again(hub, download, tmp_path):
    """A host deployed by an earlier version holds the files flat in the repo folder: moving to
    one folder per commit hard-links them (no byte fetched, no new disk space)."""
    base = tmp_path / "flat"
    main_sha = shas(hub)[0]
    download(REPO, base, revision="main")  # the flat layout
    hub.reset()
    plan = download(REPO, base, revision="main", snapshots=True, check_mode=True)
    assert (sorted(plan["files_to_reuse"]), plan["bytes_to_download"]) == (sorted(MAIN_FILES), 0)
    moved = download(REPO, base, revision="main", snapshots=True)
    assert (moved["bytes_downloaded"], moved["changed"]) == (0, True)
    snap = base / "snapshots" / main_sha
    assert files_in(snap) == MAIN_FILES
    for name in MAIN_FILES:
        assert os.stat(snap / name).st_ino == os.stat(base / name).st_ino
    sent = hub.stats().get("bytes_sent", {})
    assert not any(REPO in key for key in sent), sent  # no body byte of the repo was sent
    again = download(REPO, base, revision="main", snapshots=True)
    assert (again["changed"], again["files_to_reuse"]) == (False, [])
