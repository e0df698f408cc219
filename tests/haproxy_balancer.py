# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The fleet balancer's real HAProxy for tests: the role's own templates, rendered as Ansible does.

`render_config()` renders roles/vllm_balancer/templates/haproxy.cfg.j2 (and the keys files)
with the role's defaults and the test's overrides; `balancer()` runs Debian's haproxy in the
foreground on a free loopback port, with its runtime socket and files in a temporary folder.
`Runtime` speaks to that socket as community.general.haproxy does (one command a connection).
Used by tests/integration/test_balancer.py.
"""

import contextlib
import csv
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import jinja2
import yaml
from ansible.plugins.filter.core import comment
from ports import free_port
from repo_paths import ROOT

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
ROLE = ROOT / "roles" / "vllm_balancer"
HAVE_HAPROXY = os.access(HAPROXY, os.X_OK)


def _env():
    env = jinja2.Environment(  # noqa: S701 - HAProxy configuration, not HTML: Ansible escapes nothing
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True
    )
    env.filters["comment"] = comment
    env.filters["bool"] = bool
    return env


def role_vars(folder, port, **overrides):
    """The role's defaults with the test's paths, plus the role's derived vars (vars/main.yml)."""
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values.update(
        vllm_balancer_listen="127.0.0.1",
        vllm_balancer_port=port,
        vllm_balancer_api_keys_file=str(folder / "api-keys.lst"),
        vllm_balancer_upstream_key_file=str(folder / "upstream-key.map"),
        vllm_balancer_socket=str(folder / "admin.sock"),
        vllm_balancer_server_state_file=str(folder / "server-state"),
        vllm_balancer_stats_port=free_port(),
        # HAProxy runs as the test's user, without chroot or syslog.
        vllm_balancer_user="",
        vllm_balancer_group="",
        vllm_balancer_chroot="",
        vllm_balancer_log_target="",
        ansible_managed="Ansible managed",
    )
    values.update(overrides)
    # vars/main.yml's switches and the default pool, as the role computes them
    values["__vllm_balancer_auth"] = not values["vllm_balancer_open"]
    values["__vllm_balancer_upstream_auth"] = len(values["vllm_balancer_upstream_key"]) > 0
    values["__vllm_balancer_default_pool"] = (
        values["vllm_balancer_default_pool"] or next(iter(values["vllm_balancer_pools"]), ""))
    return values


def render(template, values):
    # Ansible's template module trims blocks (trim_blocks=True), as _env() does.
    return _env().from_string((ROLE / "templates" / template).read_text()).render(values)


def write_config(folder: Path, port, **overrides):
    """The role's files for this balancer under folder; returns (config path, values)."""
    values = role_vars(folder, port, **overrides)
    if values["__vllm_balancer_auth"]:
        keys = folder / "api-keys.lst"
        keys.write_text(render("api-keys.lst.j2", values))
        keys.chmod(0o600)
    if values["__vllm_balancer_upstream_auth"]:
        upstream = folder / "upstream-key.map"
        upstream.write_text(render("upstream-key.map.j2", values))
        upstream.chmod(0o600)
    config = folder / "haproxy.cfg"
    config.write_text(render("haproxy.cfg.j2", values))
    return config, values


def check_config(config):
    """`haproxy -c -f`, the role's validate: (returncode, output)."""
    done = subprocess.run([HAPROXY, "-c", "-f", str(config)], capture_output=True, text=True,
                          check=False)
    return done.returncode, done.stdout + done.stderr


@dataclass
class Balancer:
    url: str
    folder: Path
    config: Path
    values: dict
    runtime: "Runtime"
    pid: int

    @property
    def stats_url(self):
        return f"http://127.0.0.1:{self.values['vllm_balancer_stats_port']}"


@contextlib.contextmanager
def balancer(tmp_path, master=False, **overrides):
    """haproxy with the role's configuration (and keys); yields a Balancer. `master`: in
    master-worker mode (-W, as Debian's unit runs it), so SIGUSR2 to `pid` reloads it."""
    folder = tmp_path / "haproxy"
    folder.mkdir()
    port = free_port()
    config, values = write_config(folder, port, **overrides)
    rc, out = check_config(config)
    assert rc == 0, out
    log = (folder / "haproxy.log").open("w")
    mode = ["-W", "-db"] if master else ["-db"]
    proc = subprocess.Popen([HAPROXY, *mode, "-f", str(config)], stdout=log,
                            stderr=subprocess.STDOUT)
    runtime = Runtime(str(folder / "admin.sock"))
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            assert proc.poll() is None, (folder / "haproxy.log").read_text()
            assert time.monotonic() < deadline, "haproxy did not listen within 10 s"
            time.sleep(0.05)
        # The runtime API's socket too: in master-worker mode the port can accept (the
        # master bound it) before the worker answers on admin.sock (CI: FileNotFoundError
        # from the first `show stat` on a loaded 2-core machine).
        while True:
            with contextlib.suppress(OSError):
                if "Name: HAProxy" in runtime.command("show info"):
                    break
            assert proc.poll() is None, (folder / "haproxy.log").read_text()
            assert time.monotonic() < deadline, "haproxy's runtime API did not answer within 10 s"
            time.sleep(0.05)
        yield Balancer(f"http://127.0.0.1:{port}", folder, config, values, runtime, proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


class Runtime:
    """HAProxy's runtime API on its stats socket."""

    def __init__(self, path):
        self.path = path

    def command(self, line):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(self.path)
            s.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def stat(self, backend, server):
        """The `show stat` row of one server (status, scur, chkdown, ...)."""
        rows = csv.DictReader(self.command("show stat").lstrip("# ").splitlines())
        for row in rows:
            if row["pxname"] == backend and row["svname"] == server:
                return row
        raise KeyError(f"{backend}/{server} not in show stat")
