# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 46, case 3: retention on a shared models volume is volume-wide.

Two hosts on one volume, two revisions apart: host 1 (gpu1) serves c, host 2 (gpu2) still
serves a. Host 1's retention must keep a, which only host 2's reference on the volume names;
a reference it cannot read keeps every revision; without references retention is as before.
"""

import json
import os

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import (
    models_volume,
    volume_refs,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.revisions import (
    prune,
    prune_on_volume,
)

from .test_revisions import write_revision

REPO = "org/model"
A, B, C = "a" * 40, "b" * 40, "c" * 40


def deployment(revision, repo=REPO, model="m"):
    return {"model": model, "repo_id": repo, "revision": revision}


@pytest.fixture
def root(tmp_path):
    """The volume's root with org/model at a (oldest), b and c (newest) verified."""
    snaps = tmp_path / REPO / "snapshots"
    for commit, at in ((A, 100.0), (B, 200.0), (C, 300.0)):
        write_revision(snaps / commit, commit, {"config.json": b"{}",
                                                "model.safetensors": commit[:1].encode() * 10}, at)
    return tmp_path


def volume(root, host, record, **kw):
    return dict({"models_root": str(root), "repo_id": REPO, "host": host, "name": "nfs-a",
                 "record": record, "staged": []}, **kw)


def host1_retention(root, keep=1, **kw):
    """gpu1 switched to c (nothing before it): its retention, keep 1."""
    return prune_on_volume(str(root / REPO), keep, [C],
                           volume(root, "gpu1", {"active": deployment(C)}), **kw)


def snapshots(root):
    return sorted(os.listdir(root / REPO / "snapshots"))


def put_reference(root, host, text):
    folder = root / ".vllm-fleet" / "refs"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{host}.json").write_text(text)
    return folder / f"{host}.json"


def gpu2_serves_a(root):
    return volume_refs.write_reference(str(root), "gpu2", volume_refs.reference(
        "gpu2", "nfs-a", {"active": deployment(A)}))


def test_a_revision_another_host_serves_survives_this_hosts_retention(root):
    gpu2_serves_a(root)
    result = host1_retention(root)
    assert snapshots(root) == [A, C]  # b went; a, which gpu2 serves, stayed whole
    assert sorted(os.listdir(root / REPO / "snapshots" / A)) == [
        ".vllm-fleet-manifest.json", "config.json", "model.safetensors"]
    assert [r["commit"] for r in result["removed"]] == [B]
    assert result["held_by_hosts"] == {A: ["gpu2 (serving)"], C: ["gpu1 (serving)"]}
    assert result["references_unreadable"] == []


@pytest.mark.parametrize(("record", "role"), [
    ({"active": deployment("x" * 40, repo="org/other"), "sleeping": [dict(deployment(A),
                                                                          level=1)]}, "asleep"),
    ({"active": deployment(C), "previous": deployment(A)}, "rollback"),
])
def test_a_revision_another_host_has_asleep_or_may_roll_back_to_survives(root, record, role):
    volume_refs.write_reference(str(root), "gpu2", volume_refs.reference("gpu2", "nfs-a", record))
    result = host1_retention(root)
    assert snapshots(root) == [A, C]
    assert result["held_by_hosts"][A] == [f"gpu2 ({role})"]


def test_a_revision_another_host_staged_survives(root):
    volume_refs.write_reference(str(root), "gpu2", volume_refs.reference(
        "gpu2", "nfs-a", {}, repo_id=REPO, staged=[B]))
    host1_retention(root)
    assert snapshots(root) == [B, C]


def test_this_hosts_reference_is_written_from_its_record(root):
    record = {"active": deployment(C), "previous": deployment(B),
              "sleeping": [dict(deployment("d" * 40, repo="org/other"), level=2)]}
    prune_on_volume(str(root / REPO), 1, [C], volume(root, "gpu1", record))
    ref = json.loads((root / ".vllm-fleet" / "refs" / "gpu1.json").read_text())
    assert (ref["host"], ref["volume"], ref["version"]) == ("gpu1", "nfs-a", 1)
    assert ref["revisions"] == [
        {"repo_id": REPO, "revision": C, "as": "serving"},
        {"repo_id": "org/other", "revision": "d" * 40, "as": "asleep"},
        {"repo_id": REPO, "revision": B, "as": "rollback"},
    ]
    assert snapshots(root) == [B, C]  # its own rollback target b is kept (it takes no slot away)
    assert not [n for n in os.listdir(root / ".vllm-fleet" / "refs") if n.startswith(".")]


def make_fifo(root):
    folder = root / ".vllm-fleet" / "refs"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "gpu2.json")


def make_link(root):
    target = root / "elsewhere.json"
    target.write_text(json.dumps({"revisions": []}))
    folder = root / ".vllm-fleet" / "refs"
    folder.mkdir(parents=True)
    os.symlink(target, folder / "gpu2.json")


@pytest.mark.parametrize(("plant", "why"), [
    (lambda root: put_reference(root, "gpu2", "{not json"), "wanted JSON"),
    (lambda root: put_reference(root, "gpu2", '{"host": "gpu2"}'), "'revisions' list"),
    (lambda root: put_reference(root, "gpu2", '{"revisions": [{"repo_id": 3}]}'),
     "each revision as"),
    (lambda root: put_reference(root, "gpu2", " " * (models_volume.STATE_LIMIT + 1)),
     "a state file is at most"),
    (make_link, "symbolic link"),
    (make_fifo, "FIFO"),
])
def test_an_unreadable_reference_keeps_every_revision(root, plant, why):
    plant(root)
    result = host1_retention(root)
    assert snapshots(root) == [A, B, C]
    assert result["removed"] == []
    [bad] = result["references_unreadable"]
    assert bad["file"] == str(root / ".vllm-fleet" / "refs" / "gpu2.json")
    assert why in bad["why"]


def test_a_refs_folder_that_is_a_link_keeps_every_revision_and_is_not_written_through(root):
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    (root / ".vllm-fleet").mkdir()
    os.symlink(elsewhere, root / ".vllm-fleet" / "refs")
    with pytest.raises(volume_refs.VolumeRefError, match="symbolic link, wanted a folder"):
        host1_retention(root)
    assert os.listdir(elsewhere) == []
    result = prune_on_volume(str(root / REPO), 1, [C], volume(root, "gpu1", {}),
                             check_mode=True)
    assert result["removed"] == []
    assert result["references_unreadable"][0]["file"] == str(root / ".vllm-fleet" / "refs")


def test_without_references_retention_is_as_before(root, tmp_path_factory):
    twin = tmp_path_factory.mktemp("twin")
    for commit, at in ((A, 100.0), (B, 200.0), (C, 300.0)):
        write_revision(twin / "snapshots" / commit, commit, {"config.json": b"{}"}, at)
    today = prune(str(twin), 2, [C])
    result = prune_on_volume(str(root / REPO), 2, [C], volume(root, "gpu1", {}))
    assert [r["commit"] for r in result["removed"]] == [r["commit"] for r in today["removed"]]
    assert snapshots(root) == [B, C]


def test_check_mode_writes_no_reference_and_removes_nothing(root):
    gpu2_serves_a(root)
    result = host1_retention(root, check_mode=True)
    assert [r["commit"] for r in result["removed"]] == [B]
    assert snapshots(root) == [A, B, C]
    assert os.listdir(root / ".vllm-fleet" / "refs") == ["gpu2.json"]


def test_retention_false_writes_the_reference_only(root):
    result = prune_on_volume(str(root / REPO), 1, [], volume(
        root, "gpu2", {"active": deployment(A)}, staged=[B], retention=False))
    assert snapshots(root) == [A, B, C]
    assert [e["as"] for e in result["reference_revisions"]] == ["serving", "staged"]
    assert result["reference"] == str(root / ".vllm-fleet" / "refs" / "gpu2.json")


class Lease:
    """The repo's lease: records what happened while it was held."""

    def __init__(self, root):
        self.root, self.seen = root, []

    def __enter__(self):
        self.seen.append(("enter", snapshots(self.root)))

    def __exit__(self, *exc):
        refs = sorted(os.listdir(self.root / ".vllm-fleet" / "refs"))
        self.seen.append(("exit", snapshots(self.root), refs))
        return False


def test_the_reference_is_written_and_retention_done_under_the_lease(root):
    lease = Lease(root)
    host1_retention(root, lease=lease)
    assert lease.seen == [("enter", [A, B, C]), ("exit", [C], ["gpu1.json"])]


@pytest.mark.parametrize("host", ["", ".hidden", "a/b", "..", "x" * 201, "gpu 1"])
def test_a_host_name_that_is_no_file_name_is_refused(root, host):
    with pytest.raises(volume_refs.VolumeRefError, match="wanted a host name usable"):
        volume_refs.ref_path(str(root), host)


def test_an_operator_removing_a_reference_releases_its_revisions(root):
    path = gpu2_serves_a(root)
    os.remove(path)  # gpu2 left the fleet
    host1_retention(root)
    assert snapshots(root) == [C]


def test_writing_the_same_reference_again_changes_nothing(root):
    args = (str(root / REPO), 1, [], volume(root, "gpu2", {"active": deployment(A)},
                                            retention=False))
    assert prune_on_volume(*args)["changed"] is True
    assert prune_on_volume(*args)["changed"] is False
