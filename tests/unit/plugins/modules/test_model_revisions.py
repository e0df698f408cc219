# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""model_revisions on a shared volume: the record read from the host, the repo's lease taken."""

import json
import os

from ansible_collections.vllm_fleet.fleet.plugins.modules import model_revisions

from unit.module_harness import run_module
from unit.plugins.module_utils.test_revisions import write_revision

REPO = "org/model"
A, C = "a" * 40, "c" * 40


def setup(tmp_path):
    for commit, at in ((A, 100.0), (C, 300.0)):
        write_revision(tmp_path / REPO / "snapshots" / commit, commit, {"config.json": b"{}"}, at)
    record = tmp_path / "gpu1.fact"
    record.write_text(json.dumps({"active": {"repo_id": REPO, "revision": C}}))
    refs = tmp_path / ".vllm-fleet" / "refs"
    refs.mkdir(parents=True)
    (refs / "gpu2.json").write_text(json.dumps(
        {"host": "gpu2", "revisions": [{"repo_id": REPO, "revision": A, "as": "serving"}]}))
    return {"base_dir": str(tmp_path / REPO), "keep": 1, "protect": [C], "volume": "nfs-a",
            "models_root": str(tmp_path), "repo_id": REPO, "host": "gpu1",
            "record_file": str(record)}


def test_module_keeps_what_another_host_serves_under_the_lease(tmp_path):
    args = setup(tmp_path)
    result = run_module(model_revisions.main, args)
    assert result["failed"] is False, result
    assert result["removed"] == []
    assert result["held_by_hosts"] == {A: ["gpu2 (serving)"], C: ["gpu1 (serving)"]}
    assert sorted(os.listdir(tmp_path / REPO / "snapshots")) == [A, C]
    assert not (tmp_path / REPO / ".cache" / "vllm-fleet" / "lease").exists()  # released


def test_module_without_a_volume_is_as_before(tmp_path):
    args = setup(tmp_path)
    args["volume"] = ""
    result = run_module(model_revisions.main, args)
    assert [r["commit"] for r in result["removed"]] == [A]


def test_module_on_a_volume_without_its_host_fails_naming_it(tmp_path):
    args = setup(tmp_path)
    del args["host"]
    result = run_module(model_revisions.main, args)
    assert result["failed"] is True
    assert result["msg"] == "volume nfs-a is shared: wanted host too, found none"


def test_module_refuses_a_lease_folder_that_is_a_link(tmp_path):
    args = setup(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / REPO / ".cache").symlink_to(elsewhere)
    result = run_module(model_revisions.main, args)
    assert result["failed"] is True
    assert "is a symbolic link, not a folder" in result["msg"]
    assert os.listdir(elsewhere) == []
    assert sorted(os.listdir(tmp_path / REPO / "snapshots")) == [A, C]
