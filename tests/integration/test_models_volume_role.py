# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 34, item 4: hosts that share a models volume stage a model once.

The role model_download, run by ansible-playbook with its real tasks against the lab Hub,
for three inventory hosts on this machine (local connection): gpu1 and gpu2 name the same
volume (one models folder), gpu3 has its own. gpu1 stages for both; gpu2 runs the same job
after it and fetches nothing; gpu3 downloads for itself.

Issue 46, case 3: retention on that shared volume is volume-wide. gpu2 serves org/revs at
main, gpu1 switched to v2 (nothing before it); gpu1's retention (keep 1) leaves main whole,
because gpu2's reference on the volume names it.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.revisions import (
    prune_on_volume,
)
from repo_paths import ROOT

SMALL = "org/small"
PLAY = """
- name: Stage a model on three hosts, two of which share a volume
  hosts: all
  connection: local
  gather_facts: false
  roles:
    - role: vllm_fleet.fleet.model_download
  post_tasks:
    - name: Keep what this host's download did
      ansible.builtin.copy:
        content: "{{ model_download_result | to_json }}"
        dest: "{{ results_dir }}/{{ inventory_hostname }}.json"
        mode: "0644"
"""
RETAIN = """
- name: A host serves a revision of org/revs, then retention runs on the shared volume
  hosts: all  # inventory order: gpu2 (it switched to main earlier), then gpu1 (to v2)
  connection: local
  gather_facts: false
  serial: 1
  roles:
    - role: vllm_fleet.fleet.model_download
  post_tasks:
    - name: The record of the switch (what vllm_cutover writes)
      ansible.builtin.copy:
        content: "{{ {'active': {'model': 'revs', 'repo_id': model_download_repo_id,
                                 'revision': model_download_commit}} | to_json }}"
        dest: "{{ results_dir }}/{{ inventory_hostname }}.fact"
        mode: "0644"
    - name: Retention after the switch (as roles/vllm_model/tasks/cutover.yml runs it)
      vllm_fleet.fleet.model_revisions:
        base_dir: "{{ model_download_local_dir }}"
        keep: 1
        protect: ["{{ model_download_commit }}"]
        staged: ["{{ model_download_commit }}"]
        volume: "{{ model_download_volume }}"
        models_root: "{{ model_download_models_root }}"
        repo_id: "{{ model_download_repo_id }}"
        host: "{{ inventory_hostname }}"
        record_file: "{{ results_dir }}/{{ inventory_hostname }}.fact"
        lease_s: "{{ model_download_lease_s }}"
        lease_wait_s: "{{ model_download_lease_wait_s }}"
      register: retention
    - name: Keep what this host's retention did
      ansible.builtin.copy:
        content: "{{ {'download': model_download_result, 'retention': retention} | to_json }}"
        dest: "{{ results_dir }}/{{ inventory_hostname }}.json"
        mode: "0644"
"""


def run_play(tmp_path, play, inventory, *extra):
    (tmp_path / "play.yml").write_text(play)
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    return subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i",
         str(tmp_path / "inventory.json"), *extra, str(tmp_path / "play.yml")],
        capture_output=True, text=True, env=env, check=False, timeout=600)


def test_one_stager_per_shared_volume(hub, tmp_path):
    shared, own = tmp_path / "shared-volume", tmp_path / "own-volume"
    venv = Path(sys.executable).parent.parent
    inventory = {"all": {"hosts": {
        "gpu1": {"model_download_models_root": str(shared), "model_download_volume": "nfs-a"},
        "gpu2": {"model_download_models_root": str(shared), "model_download_volume": "nfs-a"},
        "gpu3": {"model_download_models_root": str(own)},
    }, "vars": {
        "ansible_python_interpreter": sys.executable,
        "model_download_repo_id": SMALL, "model_download_endpoint": hub.url,
        "model_download_tools_venv": str(venv),
        "model_download_hf_home": str(tmp_path / "hf"), "model_download_margin_bytes": 0,
        "model_download_progress_interval_s": 1, "results_dir": str(tmp_path),
    }}}
    proc = run_play(tmp_path, PLAY, inventory, "-f", "3")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    results = {h: json.loads((tmp_path / f"{h}.json").read_text())
               for h in ("gpu1", "gpu2", "gpu3")}
    total = sum(hub.sizes[SMALL].values())
    assert results["gpu1"]["bytes_downloaded"] == total
    assert (results["gpu2"]["bytes_downloaded"], results["gpu2"]["changed"]) == (0, False)
    assert results["gpu3"]["bytes_downloaded"] == total
    assert results["gpu1"]["volume"]["locks"] == ["flock", "lease"]
    assert results["gpu3"]["volume"]["locks"] == ["flock"]
    # The order: gpu2's job ran after gpu1's ("Verify what the stager ... downloaded").
    assert out.index("Download on this host") < out.index("Verify what the stager")
    assert hub.stats()["requests"][f"{SMALL}/model-00001-of-00002.safetensors"] == 2
    assert not (shared / SMALL / ".cache" / "vllm-fleet" / "lease").exists()


def test_shared_volume_retention_keeps_what_another_host_serves(hub, tmp_path):
    shared = tmp_path / "shared-volume"
    venv = Path(sys.executable).parent.parent
    inventory = {"all": {"hosts": {
        "gpu2": {"model_download_revision": "main"},
        "gpu1": {"model_download_revision": "v2"},
    }, "vars": {
        "ansible_python_interpreter": sys.executable,
        "model_download_models_root": str(shared), "model_download_volume": "nfs-a",
        "model_download_repo_id": "org/revs", "model_download_endpoint": hub.url,
        "model_download_tools_venv": str(venv),
        "model_download_hf_home": str(tmp_path / "hf"), "model_download_margin_bytes": 0,
        "model_download_progress_interval_s": 1, "results_dir": str(tmp_path),
    }}}
    proc = run_play(tmp_path, RETAIN, inventory)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    gpu1, gpu2 = (json.loads((tmp_path / f"{h}.json").read_text()) for h in ("gpu1", "gpu2"))
    main, v2 = gpu2["download"]["revision"], gpu1["download"]["revision"]
    assert main != v2
    served = shared / "org" / "revs" / "snapshots" / main
    # gpu2's folder is whole: its next restart finds config.json and its weights.
    assert {"config.json", "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors"} <= set(os.listdir(served))
    assert gpu1["retention"]["removed"] == []
    assert gpu1["retention"]["held_by_hosts"] == {main: ["gpu2 (serving)", "gpu2 (staged)"],
                                                  v2: ["gpu1 (serving)", "gpu1 (staged)"]}
    assert gpu1["retention"]["references_unreadable"] == []
    assert sorted(os.listdir(shared / ".vllm-fleet" / "refs")) == ["gpu1.json", "gpu2.json"]
    assert not (shared / "org" / "revs" / ".cache" / "vllm-fleet" / "lease").exists()
    # The contrast: once gpu2 left the fleet and an operator removed its reference, gpu1's
    # retention removes main, as it did before references (what broke gpu2's restart).
    os.remove(shared / ".vllm-fleet" / "refs" / "gpu2.json")
    record = {"active": {"repo_id": "org/revs", "revision": v2}}
    again = prune_on_volume(str(shared / "org" / "revs"), 1, [v2], {
        "models_root": str(shared), "repo_id": "org/revs", "host": "gpu1", "name": "nfs-a",
        "record": record})
    assert [r["commit"] for r in again["removed"]] == [main]
    assert not served.exists()
