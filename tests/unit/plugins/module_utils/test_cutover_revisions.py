# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""A new revision of the serving model is a blue/green switch on its one unit (issue 12, case 5).

The unit reads the model through a host-local link (a real symlink in tmp_path here) that the
switch points at one commit's folder. The fake host's unit comes up healthy or crashes
depending on where that link points when it starts, as vLLM does with a good or a broken
revision.
"""

import os
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import record as record_mod
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.cutover import (
    Cutover,
    CutoverError,
    Host,
    Settings,
    link_target,
    plan,
    point_link,
)

from unit.fake_host import CRASH, HEALTHY, FakeHost

OLD, NEW = "1" * 40, "2" * 40
UNIT = "vllm-tiny.service"


class RevisionHost(FakeHost):
    """A fake host whose unit's behaviour is the one of the revision its link points at."""

    def __init__(self, link, behaviours):
        super().__init__()
        self.link = link
        self.behaviours = behaviours  # model dir -> behaviour
        self.started_dirs = []

    def _start(self, unit, restart):
        target = os.readlink(self.link)
        self.started_dirs.append(os.path.basename(target))
        unit.behaviour = self.behaviours[target]
        return super()._start(unit, restart)


def entry(tmp_path, revision, port=8123):
    return {"model": "tiny", "unit": UNIT, "url": f"http://127.0.0.1:{port}", "port": port,
            "served_model_name": "tiny-model", "startup_timeout_s": 60, "repo_id": "org/tiny",
            "revision": revision, "model_dir": str(tmp_path / "snapshots" / revision),
            "model_link": str(tmp_path / "links" / "tiny")}


class World:
    def __init__(self, tmp_path, new_behaviour=HEALTHY, link_at=OLD, record_old=True):
        self.old = dict(entry(tmp_path, OLD), since="2027-01-01T00:00:00+00:00")
        self.new = entry(tmp_path, NEW)
        for rev in (OLD, NEW):
            (tmp_path / "snapshots" / rev).mkdir(parents=True)
        self.link = self.new["model_link"]
        if link_at:
            point_link(self.link, str(tmp_path / "snapshots" / link_at))
        self.host = RevisionHost(self.link, {self.old["model_dir"]: HEALTHY,
                                             self.new["model_dir"]: new_behaviour})
        self.host.unit(UNIT, self.new["url"], "tiny-model", active=True)
        self.state_file = str(tmp_path / "vllm_fleet.fact")
        if not record_old:
            self.old.pop("model_dir")
            self.old.pop("model_link")
        record_mod.write(self.state_file, {"active": self.old, "previous": None, "history": []})
        self.before = Path(self.state_file).read_bytes()

    def run(self, check_mode=False):
        host = Host(self.host.run_command, request=self.host.request, clock=self.host.clock,
                    wall=self.host.wall, sleep=self.host.sleep, proc=self.host.proc)
        cut = Cutover(host, self.new, self.state_file, Settings(strategy="parallel"))
        return cut.run_plan(record_mod.load(self.state_file), check_mode)

    def target(self):
        return os.path.basename(link_target(self.link))


def test_plan_is_update_when_the_link_points_at_another_revision(tmp_path):
    new = entry(tmp_path, NEW)
    running = {"ActiveState": "active"}
    record = {"active": dict(entry(tmp_path, OLD))}
    assert plan(record, new, False, running, link_now=str(tmp_path / "snapshots" / OLD)) == "update"
    assert plan(record, new, True, running, link_now=new["model_dir"]) == "restart"
    assert plan(record, new, False, running, link_now=new["model_dir"]) == "none"
    # not running: started on the new revision (nothing serves that could be kept)
    assert plan(record, new, False, {"ActiveState": "failed"}, link_now=None) == "start"


def test_a_good_new_revision_replaces_the_old_one_on_the_same_unit(tmp_path):
    world = World(tmp_path)
    result = world.run()
    assert (result["action"], result["strategy"], result["revision_before"],
            result["revision_after"]) == ("update", "sequential", OLD, NEW)
    assert world.host.started_dirs == [NEW]
    assert world.target() == NEW
    assert world.host.state_calls() == [("stop", UNIT), ("reset-failed", UNIT), ("start", UNIT),
                                        ("enable", UNIT)]
    saved = record_mod.load(world.state_file)
    assert (saved["active"]["revision"], saved["previous"]["revision"]) == (NEW, OLD)
    assert saved["previous"]["model_dir"].endswith(OLD)


def test_a_new_revision_that_fails_its_gate_leaves_the_old_revision_serving(tmp_path):
    world = World(tmp_path, new_behaviour=CRASH)
    with pytest.raises(CutoverError) as caught:
        world.run()
    exc = caught.value
    assert exc.msg == (f"cutover to tiny@{NEW[:12]} failed: green tiny@{NEW[:12]} failed its "
                       f"health gate at process: {UNIT} failed (failed). Rolled back: "
                       f"tiny@{OLD[:12]} is serving again.")
    assert (exc.fields["rolled_back"], exc.fields["revision_after"]) == (True, OLD)
    assert world.host.started_dirs == [NEW, OLD]  # the new revision, then the old one again
    assert world.target() == OLD
    assert world.host.units[UNIT].active_state == "active"
    assert Path(world.state_file).read_bytes() == world.before  # the record still says OLD


def test_check_mode_reports_the_update_and_touches_nothing(tmp_path):
    world = World(tmp_path)
    result = world.run(check_mode=True)
    assert (result["action"], result["changed"]) == ("update", True)
    assert world.target() == OLD
    assert world.host.state_calls() == []


def test_a_unit_from_before_revision_folders_restarts_on_the_new_one(tmp_path):
    """No link yet (a host deployed by an earlier version): no old revision folder to go back
    to, so the active model restarts in place on the new revision, as before."""
    world = World(tmp_path, link_at=None, record_old=False)
    result = world.run()
    assert result["action"] == "restart"
    assert world.target() == NEW
    assert world.host.started_dirs == [NEW]


def test_point_link_replaces_a_link_atomically_and_refuses_a_folder(tmp_path):
    link = str(tmp_path / "l" / "m")
    assert point_link(link, "/a") is True
    assert point_link(link, "/a") is False
    assert point_link(link, "/b") is True
    assert os.readlink(link) == "/b"
    assert sorted(os.listdir(tmp_path / "l")) == ["m"]  # no temporary link left
    folder = tmp_path / "dir"
    folder.mkdir()
    with pytest.raises(IsADirectoryError):
        point_link(str(folder), "/c")
