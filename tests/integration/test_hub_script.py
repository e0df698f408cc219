# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""lab/hub.sh start when another checkout's Hub holds the port: it names that one.

Found by a new-user trial (2026-12-03): `make test` in one checkout had left its Hub on
8765, and `make demo` in another failed with a bare "Address already in use" and a hint
(LAB_HUB_PORT) that was not enough on its own. Here a listener in another directory holds
a free loopback port; the script must fail and name its pid, command and directory.
"""

import os
import shutil
import subprocess
import sys

import pytest
from ports import free_port
from repo_paths import ROOT

pytestmark = pytest.mark.skipif(not shutil.which("ss"), reason="ss (iproute2) is not installed")


LISTENER = (
    "import socket, time\n"
    "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
    "print(s.getsockname()[1], flush=True); time.sleep(60)\n"
)


def _hub_root(tmp_path):
    """A Hub root with the files hub.sh checks for, so it makes no models."""
    root = tmp_path / "hub"
    gqa = root / "vllm-fleet-lab" / "tiny-gqa"
    for d in (gqa / ".revisions" / "update-good", gqa / ".revisions" / "update-broken",
              root / "vllm-fleet-lab" / "tiny-mla"):
        d.mkdir(parents=True)
    for repo in (gqa, root / "vllm-fleet-lab" / "tiny-mla"):
        (repo / "config.json").write_text("{}")
    return root


def test_start_names_the_other_checkouts_hub_holding_the_port(tmp_path):
    other = tmp_path / "other-checkout"
    other.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", LISTENER],
        cwd=other, stdout=subprocess.PIPE, text=True)
    try:
        port = int(holder.stdout.readline())
        env = dict(os.environ, LAB_HUB_HOST="localhost", LAB_HUB_PORT=str(port),
                   LAB_HUB_ROOT=str(_hub_root(tmp_path)), PYTHON=sys.executable)
        done = subprocess.run(["bash", str(ROOT / "lab" / "hub.sh"), "start"], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
    finally:
        holder.kill()
        holder.wait()
        subprocess.run(["bash", str(ROOT / "lab" / "hub.sh"), "stop"], check=False,
                       env=dict(os.environ, LAB_HUB_HOST="localhost"), timeout=30)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Address already in use" in done.stderr
    assert f"lab hub: port {port} is held by pid {holder.pid} (" in done.stderr
    assert f") in {other}.\n" in done.stderr
    assert f"cd {other} && make lab-down" in done.stderr
    assert "LAB_HUB_PORT=8766, and -e vllm_fleet_hf_endpoint=http://localhost:8766" in done.stderr


def test_a_free_port_gets_a_serving_hub_and_stop_frees_it(tmp_path):
    port = free_port()
    env = dict(os.environ, LAB_HUB_HOST="localhost", LAB_HUB_PORT=str(port),
               LAB_HUB_ROOT=str(_hub_root(tmp_path)), PYTHON=sys.executable)
    hub = ["bash", str(ROOT / "lab" / "hub.sh")]
    try:
        started = subprocess.run([*hub, "start"], env=env, capture_output=True, text=True,
                                 timeout=60, check=False)
        status = subprocess.run([*hub, "status"], env=env, capture_output=True, text=True,
                                timeout=30, check=False)
    finally:
        subprocess.run([*hub, "stop"], env=env, timeout=30, check=False)
    stopped = subprocess.run([*hub, "status"], env=env, capture_output=True, text=True,
                             timeout=30, check=False)
    assert started.returncode == 0, started.stderr
    assert f"on http://localhost:{port} (pid " in started.stdout
    assert status.returncode == 0
    assert status.stdout.startswith("running (pid ")
    assert (stopped.returncode, stopped.stdout) == (3, "stopped\n")
