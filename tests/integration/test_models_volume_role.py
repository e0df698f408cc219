# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 34, item 4: hosts that share a models volume stage a model once.

The role model_download, run by ansible-playbook with its real tasks against the lab Hub,
for three inventory hosts on this machine (local connection): gpu1 and gpu2 name the same
volume (one models folder), gpu3 has its own. gpu1 stages for both; gpu2 runs the same job
after it and fetches nothing; gpu3 downloads for itself.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

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


def test_one_stager_per_shared_volume(hub, tmp_path):
    shared, own = tmp_path / "shared-volume", tmp_path / "own-volume"
    (tmp_path / "play.yml").write_text(PLAY)
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
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i",
         str(tmp_path / "inventory.json"), "-f", "3", str(tmp_path / "play.yml")],
        capture_output=True, text=True, env=env, check=False, timeout=600)
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
