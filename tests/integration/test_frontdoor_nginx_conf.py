# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 32: the front door's sizes in nginx.conf (roles/vllm_frontdoor/tasks/nginx_conf.yml).

worker_connections (events block) and worker_rlimit_nofile (main context) cannot be set from
conf.d, where the front door's server lives. The role's own task file runs through
ansible-playbook on a copy of this machine's Debian nginx.conf (the package's, with its
worker_connections 768 and no worker_rlimit_nofile): the two lines are set, nothing else of
the file changes, a second run changes nothing, and `nginx -t` takes the result.
"""

import difflib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nginx_frontdoor import HAVE_NGINX, NGINX
from repo_paths import ROOT

DEBIAN_CONF = Path("/etc/nginx/nginx.conf")
pytestmark = pytest.mark.skipif(
    not (HAVE_NGINX and DEBIAN_CONF.exists()),
    reason="Debian's nginx is not installed (apt-get install -y --no-install-recommends nginx)")

PLAY = """
- name: Size nginx the way the front door role does
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Run the role's nginx.conf tasks
      ansible.builtin.include_tasks: {tasks}
  handlers:
    - name: Note the reload
      ansible.builtin.debug:
        msg: reload asked
      listen: Reload nginx
"""


def playbook(tmp_path, conf, *extra):
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(tasks=ROOT / "roles/vllm_frontdoor/tasks/nginx_conf.yml"))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    args = ["-e", f"__vllm_frontdoor_nginx_conf={conf}", "-e",
            "vllm_frontdoor_worker_connections=8192", "-e",
            "__vllm_frontdoor_worker_rlimit_nofile=16384", "-e",
            "vllm_frontdoor_nginx_user=www-data"]
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-e",
         f"ansible_python_interpreter={sys.executable}", *args, *extra, str(play)],
        capture_output=True, text=True, env=env, check=False, timeout=120)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
    return proc.stdout


def test_the_two_sizes_are_set_in_debians_nginx_conf_and_a_second_run_changes_nothing(tmp_path):
    conf = tmp_path / "nginx.conf"
    shutil.copy(DEBIAN_CONF, conf)
    before = conf.read_text()
    assert "\tworker_connections 768;\n" in before  # Debian's
    first = playbook(tmp_path, conf)
    after = conf.read_text()
    second = playbook(tmp_path, conf)
    diff = [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(),
                                                  lineterm="", n=0)
            if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert sorted(diff) == ["+\tworker_connections 8192;", "+worker_rlimit_nofile 16384;",
                            "-\tworker_connections 768;"]
    assert after.index("worker_processes") < after.index("worker_rlimit_nofile") < after.index(
        "events {")
    assert "changed=2" in first
    assert "reload asked" in first
    assert "changed=0" in second
    assert conf.read_text() == after
    checked = subprocess.run([NGINX, "-t", "-c", str(conf)], capture_output=True, text=True,
                             check=False)
    assert checked.returncode == 0, checked.stderr


def test_the_workers_user_is_the_one_the_models_guard_lets_through(tmp_path):
    # Debian's `user www-data;` is the default's: unchanged above. Another user is
    # written over it, in place (the guard, inet vllm_fleet_models, admits that one).
    conf = tmp_path / "nginx.conf"
    shutil.copy(DEBIAN_CONF, conf)
    before = conf.read_text()
    playbook(tmp_path, conf, "-e", "vllm_frontdoor_nginx_user=nobody")
    after = conf.read_text()
    diff = [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(),
                                                  lineterm="", n=0)
            if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert "-user www-data;" in diff
    assert "+user nobody;" in diff
    assert after.splitlines()[0] == "user nobody;"
