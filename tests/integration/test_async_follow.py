"""async_follow, the real action plugin, through ansible-playbook on this machine.

A job writes a progress file twice and exits; the play prints each progress
line while the job runs and ends with the job's own result.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from repo_paths import ROOT

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: A job that reports its progress
      ansible.builtin.shell: |
        echo '{{"bytes_done": 1073741824, "bytes_total": 4294967296, "files_done": 1,
               "files_total": 4, "rate_bytes_per_s": 100000000, "eta_seconds": 32}}' > {progress}
        sleep 2
        echo '{{"bytes_done": 3221225472, "bytes_total": 4294967296, "files_done": 3,
               "files_total": 4, "rate_bytes_per_s": 100000000, "eta_seconds": 11}}' > {progress}
        sleep 2
        echo finished
      async: 60
      poll: 0
      register: job
      changed_when: false

    - name: Follow it
      vllm_fleet.fleet.async_follow:
        jid: "{{{{ job.ansible_job_id }}}}"
        progress_file: {progress}
        kind: download
        interval: 0.5
      register: followed

    - name: Show what the job returned
      ansible.builtin.debug:
        msg: "RESULT {{{{ followed.stdout }}}} rc={{{{ followed.rc }}}}"
"""


def test_progress_lines_then_the_jobs_result(tmp_path):
    progress = tmp_path / "progress.json"
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(progress=progress))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_ASYNC_DIR=str(tmp_path / "async"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    out = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i",
                          "localhost,", "-e", f"ansible_python_interpreter={sys.executable}",
                          str(play)], capture_output=True, text=True, env=env,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    lines = out.stdout.splitlines()
    first = "  localhost: 1.00 GiB of 4.00 GiB (25.0 %), 1 of 4 files, 100.0 MB/s, about 32 s left"
    second = "  localhost: 3.00 GiB of 4.00 GiB (75.0 %), 3 of 4 files, 100.0 MB/s, about 11 s left"
    assert first in lines
    assert second in lines
    assert lines.index(first) < lines.index(second)
    assert lines.count(first) == 1  # a line is printed once, not every interval
    result = next(line for line in lines if "RESULT" in line)
    assert "RESULT finished rc=0" in result
    assert json.loads(progress.read_text())["files_done"] == 3
    # the job's status file is cleaned up
    assert list((tmp_path / "async").iterdir()) == []
