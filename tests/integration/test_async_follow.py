# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""async_follow, the real action plugin, through ansible-playbook on this machine.

A job runs until the test lets it finish; the test writes its progress file
(as hf_download would) and waits, step by step, for ansible-playbook to print
the matching line before it writes the next one, so the outcome does not
depend on how fast this machine is.
"""

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from repo_paths import ROOT

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: A job that runs until the test lets it finish
      ansible.builtin.shell: |
        while [ ! -f {done} ]; do sleep 0.1; done
        echo finished
      async: 120
      poll: 0
      register: job
      changed_when: false

    - name: Follow it
      vllm_fleet.fleet.async_follow:
        jid: "{{{{ job.ansible_job_id }}}}"
        progress_file: {progress}
        kind: download
        interval: 0.3
      register: followed

    - name: Show what the job returned
      ansible.builtin.debug:
        msg: "RESULT {{{{ followed.stdout }}}} rc={{{{ followed.rc }}}}"
"""
STATES = [
    ({"bytes_done": 1 << 30, "bytes_total": 4 << 30, "files_done": 1, "files_total": 4,
      "rate_bytes_per_s": 100_000_000, "eta_seconds": 32},
     "  localhost: 1.00 GiB of 4.00 GiB (25.0 %), 1 of 4 files, 100.0 MB/s, about 32 s left"),
    ({"bytes_done": 3 << 30, "bytes_total": 4 << 30, "files_done": 3, "files_total": 4,
      "rate_bytes_per_s": 100_000_000, "eta_seconds": 11},
     "  localhost: 3.00 GiB of 4.00 GiB (75.0 %), 3 of 4 files, 100.0 MB/s, about 11 s left"),
]


def _lines(stream, into):
    for line in stream:
        into.put(line.rstrip("\n"))
    into.put(None)


def _wait_for(lines, seen, wanted, timeout=90.0, prefix=False):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            continue
        if line is None:
            break
        seen.append(line)
        if line == wanted or (prefix and line.startswith(wanted)):
            return
    raise AssertionError(f"never printed {wanted!r}; printed:\n" + "\n".join(seen[-30:]))


def _start_play(tmp_path, interval):
    """ansible-playbook on PLAY, its lines on a queue; (process, lines, progress, done)."""
    progress, done = tmp_path / "progress.json", tmp_path / "done"
    play = tmp_path / "play.yml"
    text = PLAY.format(progress=progress, done=done)
    play.write_text(text.replace("interval: 0.3", f"interval: {interval}"))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_ASYNC_DIR=str(tmp_path / "async"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-e",
         f"ansible_python_interpreter={sys.executable}", str(play)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    return proc, lines, progress, done


def test_progress_lines_then_the_jobs_result(tmp_path):
    proc, lines, progress, done = _start_play(tmp_path, 0.3)
    seen = []
    try:
        for state, wanted in STATES:
            progress.write_text(json.dumps(state))
            _wait_for(lines, seen, wanted)
        done.touch()
        _wait_for(lines, seen, "    msg: RESULT finished rc=0")
        assert proc.wait(timeout=60) == 0
    finally:
        done.touch()
        if proc.poll() is None:
            proc.kill()
    rest = []
    while (line := lines.get(timeout=5)) is not None:
        rest.append(line)
    printed = seen + rest
    assert printed.count(STATES[0][1]) == 1  # a line is printed once, not every interval
    assert printed.index(STATES[0][1]) < printed.index(STATES[1][1])
    assert list((tmp_path / "async").iterdir()) == []  # the job's status file is cleaned up


def test_a_job_that_ended_is_returned_within_seconds_not_an_interval_later(tmp_path):
    # A 60 s interval between progress lines; the status is checked every 2 s, so the
    # job that ends just after the first line is returned long before the next one.
    proc, lines, _progress, done = _start_play(tmp_path, 60)
    seen = []
    try:
        _wait_for(lines, seen, "  localhost: running for ", prefix=True)
        done.touch()
        ended = time.monotonic()
        _wait_for(lines, seen, "    msg: RESULT finished rc=0", timeout=60)
        returned_after_s = time.monotonic() - ended
        assert proc.wait(timeout=60) == 0
    finally:
        done.touch()
        if proc.poll() is None:
            proc.kill()
    # 2 s between checks plus a module run or two; one check an interval took up to 60 s
    assert returned_after_s < 20, returned_after_s
