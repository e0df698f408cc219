# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""vllm_fleet_models_root_is_mount through ansible-playbook on this machine: the role's own
task file (roles/vllm_model/tasks/models_root.yml) with the real facts and stat. A folder
that is not a mount point, or is missing, is refused with what was wanted and what was
found; /proc (another device than /) passes."""

import os
import subprocess
import sys
from pathlib import Path

from repo_paths import ROOT

PLAY = """
- name: Check the models root the way the preflight does
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Run the role's mount check
      ansible.builtin.import_role:
        name: vllm_fleet.fleet.vllm_model
        tasks_from: models_root.yml
"""


def playbook(tmp_path, root):
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    return subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-e",
         f"ansible_python_interpreter={sys.executable}", "-e", f"vllm_fleet_models_root={root}",
         str(play)],
        capture_output=True, text=True, env=env, check=False, timeout=120)


def test_a_folder_that_is_not_a_mount_point_is_refused(tmp_path):
    root = tmp_path / "models"
    root.mkdir()
    assert root.stat().st_dev == tmp_path.stat().st_dev
    proc = playbook(tmp_path, root)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, out[-2000:]
    assert (f"vllm_fleet_models_root_is_mount is true: wanted {root} to be a mount point (the "
            f"models volume), found it on the same file system as its parent {tmp_path} "
            f"(device {root.stat().st_dev})") in out
    assert ("Nothing was written. Mount the volume, or set vllm_fleet_models_root_is_mount to "
            "false.") in out


def test_a_missing_root_is_refused(tmp_path):
    proc = playbook(tmp_path, tmp_path / "absent")
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, out[-2000:]
    assert (f"wanted {tmp_path / 'absent'} to be a mount point (the models volume), found that "
            "it does not exist.") in out


def test_a_mount_point_passes(tmp_path):
    """/proc is a mount point on any Linux (its device differs from /'s)."""
    assert os.stat("/proc").st_dev != os.stat("/").st_dev
    proc = playbook(tmp_path, "/proc")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
    assert "failed=0" in proc.stdout
