# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Retention of a repo's revision folders: only what the tool wrote, never the protected ones."""

import json
import os

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.hf_download import (
    MANIFEST_NAME,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.revisions import (
    RevisionsError,
    list_revisions,
    plan_prune,
    prune,
)


def write_revision(folder, commit, files, verified_at):
    """A folder as hf_download leaves it: the files and a manifest listing them."""
    entries = {}
    for path, data in files.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        entries[path] = {"path": path, "size": len(data), "hash": "h-" + path,
                         "mtime_ns": target.stat().st_mtime_ns}
    (folder / MANIFEST_NAME).write_text(json.dumps(
        {"version": 1, "revision": commit, "verified_at": verified_at, "files": entries}))


@pytest.fixture
def base(tmp_path):
    snaps = tmp_path / "snapshots"
    write_revision(snaps / ("a" * 40), "a" * 40, {"model.safetensors": b"A" * 100}, 100.0)
    write_revision(snaps / ("b" * 40), "b" * 40,
                   {"model.safetensors": b"B" * 200, "sub/tok.json": b"{}"}, 200.0)
    write_revision(snaps / ("c" * 40), "c" * 40, {"model.safetensors": b"C" * 300}, 300.0)
    return tmp_path


def test_lists_revisions_newest_first_and_folders_without_manifest_apart(base):
    (base / "snapshots" / "in-progress").mkdir()
    (base / "snapshots" / "in-progress" / "x.partial").write_bytes(b"x")
    revisions, unmanaged = list_revisions(str(base))
    assert [r["commit"][0] for r in revisions] == ["c", "b", "a"]
    assert [r["bytes"] for r in revisions] == [300, 202, 100]
    assert unmanaged == [str(base / "snapshots" / "in-progress")]


def test_keep_two_removes_the_oldest_only(base):
    result = prune(str(base), keep=2, protect=["c" * 40])
    assert [r["commit"][0] for r in result["removed"]] == ["a"]
    assert result["bytes_freed"] == 100
    assert sorted(os.listdir(base / "snapshots")) == ["b" * 40, "c" * 40]
    assert result["changed"] is True
    assert prune(str(base), keep=2, protect=["c" * 40])["changed"] is False


def test_a_protected_revision_stays_beyond_keep(base):
    result = prune(str(base), keep=1, protect=["c" * 40, "a" * 40])
    assert [r["commit"][0] for r in result["revisions"]] == ["c", "a"]
    assert [r["commit"][0] for r in result["removed"]] == ["b"]
    assert not (base / "snapshots" / ("b" * 40)).exists()  # sub/ went with it


def test_protected_revisions_count_towards_keep(base):
    """The serving revision (c) and the rollback target (a) fill keep=2: the newer failed
    attempt (b) goes, although it is younger than the rollback target."""
    result = prune(str(base), keep=2, protect=["c" * 40, "a" * 40])
    assert [r["commit"][0] for r in result["removed"]] == ["b"]
    assert sorted(os.listdir(base / "snapshots")) == ["a" * 40, "c" * 40]


def test_check_mode_removes_nothing(base):
    result = prune(str(base), keep=1, protect=[], check_mode=True)
    assert len(result["removed"]) == 2
    assert len(os.listdir(base / "snapshots")) == 3
    assert result["diff"] == {"before": {"revisions": ["c" * 40, "b" * 40, "a" * 40]},
                              "after": {"revisions": ["c" * 40]}}


def test_files_the_tool_did_not_write_are_never_removed(base):
    old = base / "snapshots" / ("a" * 40)
    (old / "notes-by-an-operator.txt").write_text("keep me")
    prune(str(base), keep=1, protect=[])
    assert sorted(os.listdir(old)) == ["notes-by-an-operator.txt"]


def test_a_file_hard_linked_into_a_kept_revision_frees_nothing(base):
    old = base / "snapshots" / ("a" * 40)
    os.link(old / "model.safetensors", base / "shared-copy")
    result = prune(str(base), keep=2, protect=[])
    assert result["bytes_freed"] == 0
    assert (base / "shared-copy").read_bytes() == b"A" * 100


def test_the_flat_layout_of_earlier_versions_is_one_revision(base):
    write_revision(base, "f" * 40, {"model.safetensors": b"F" * 50, "nested/x.json": b"1"}, 50.0)
    revisions = list_revisions(str(base))[0]
    assert [(r["commit"][0], r["layout"]) for r in revisions][-1] == ("f", "flat")
    prune(str(base), keep=3, protect=[])
    assert sorted(os.listdir(base)) == ["snapshots"]  # its files, folder and manifest only


def test_keep_below_one_is_refused():
    with pytest.raises(RevisionsError, match="keep must be at least 1"):
        plan_prune([], 0, [])
