# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The front door's real nginx for tests: the role's own templates, rendered as Ansible does.

`render_site()` renders roles/vllm_frontdoor/templates/vllm-fleet.conf.j2 (and, with keys,
api-keys.map.j2) with the role's defaults and the test's overrides; `front_door()` runs
Debian's nginx in a temporary prefix on a free loopback port with that server block and
an upstream text from frontdoor.upstream_conf(). Used by the keep-alive and access tests;
`nginx()`, the runner under it, takes any http-level text (bench/balancers.py's nginx).
"""

import contextlib
import os
import shutil
import socket
import subprocess
import time

import jinja2
import yaml
from ansible.plugins.filter.core import comment, regex_escape
from ansible_collections.vllm_fleet.fleet.plugins.filter.frontdoor import FilterModule as Frontdoor
from ansible_collections.vllm_fleet.fleet.plugins.filter.host_path import host_path
from ports import free_port
from repo_paths import ROOT

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
ROLE = ROOT / "roles" / "vllm_frontdoor"
HAVE_NGINX = os.access(NGINX, os.X_OK)


def _env():
    env = jinja2.Environment(  # noqa: S701 - nginx configuration, not HTML: Ansible escapes nothing
        # As Ansible's template module renders: trim_blocks on.
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True
    )
    env.filters["comment"] = comment
    env.filters["bool"] = bool
    env.filters["regex_escape"] = regex_escape
    env.filters["vllm_fleet.fleet.host_path"] = host_path
    env.filters["vllm_fleet.fleet.frontdoor_routes"] = Frontdoor().filters()["frontdoor_routes"]
    return env


def role_vars(prefix, port, **overrides):
    """The role's defaults with the test's paths, plus the role's derived vars (vars/main.yml)."""
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values.update(
        vllm_frontdoor_listen="127.0.0.1",
        vllm_frontdoor_port=port,
        vllm_frontdoor_upstream_file=str(prefix / "upstream.conf"),
        vllm_frontdoor_api_keys_file=str(prefix / "api-keys.map"),
        vllm_frontdoor_record_file=str(prefix / "deployment.prom"),
        vllm_frontdoor_hold_file=str(prefix / "switching"),
        vllm_frontdoor_hold_warm_file=str(prefix / "switching-warm"),
        vllm_frontdoor_hold_socket=str(prefix / "hold.sock"),
        ansible_managed="Ansible managed",
    )
    values.update(overrides)
    # vars/main.yml's two switches, as the role computes them
    values["__vllm_frontdoor_auth"] = not values["vllm_frontdoor_open"]
    values["__vllm_frontdoor_tls"] = len(values["vllm_frontdoor_tls_certificate"]) > 0
    return values


def render(template, values):
    return _env().from_string((ROLE / "templates" / template).read_text()).render(values)


@contextlib.contextmanager
def front_door(tmp_path, upstream_text, own_key=None, **overrides):
    """nginx with the role's server block (and keys) and this upstream; yields (url, prefix)."""
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    (prefix / "upstream.conf").write_text(upstream_text)
    port = free_port()
    values = role_vars(prefix, port, **overrides)
    if values["__vllm_frontdoor_auth"]:
        values["__vllm_frontdoor_own_key"] = own_key or "own-key-of-the-front-door-0123"
        keys = prefix / "api-keys.map"
        keys.write_text(render("api-keys.map.j2", values))
        keys.chmod(0o600)
    scheme = "https" if values["__vllm_frontdoor_tls"] else "http"
    # nginx.conf's main and events lines the role manages (tasks/main.yml), at the
    # test's worker_connections: 64 unless the test asks for another number.
    connections = overrides.get("vllm_frontdoor_worker_connections", 64)
    with nginx(prefix, render("vllm-fleet.conf.j2", values), port,
               worker_connections=connections, rlimit_nofile=2 * connections):
        yield f"{scheme}://127.0.0.1:{port}", prefix


@contextlib.contextmanager
def nginx(prefix, site_text, port, worker_connections=64, rlimit_nofile=None):
    """Debian's nginx in `prefix` with `site_text` in its http block, until it listens on port."""
    temp = prefix / "temp"
    for d in (prefix / "logs", temp):
        d.mkdir(parents=True, exist_ok=True)  # a second start in the same prefix (a reboot)
    (prefix / "site.conf").write_text(site_text)
    user = "user root root;\n" if os.geteuid() == 0 else ""  # workers write in tmp_path
    (prefix / "nginx.conf").write_text(
        f"{user}worker_processes 1;\n"
        + (f"worker_rlimit_nofile {rlimit_nofile};\n" if rlimit_nofile else "")
        + f"pid {prefix}/nginx.pid;\n"
        f"error_log {prefix}/logs/error.log info;\n"
        f"events {{ worker_connections {worker_connections}; }}\n"
        "http {\n"
        f"    access_log {prefix}/logs/access.log;\n"
        f"    client_body_temp_path {temp}/client;\n"
        f"    proxy_temp_path {temp}/proxy;\n"
        f"    fastcgi_temp_path {temp}/fastcgi;\n"
        f"    uwsgi_temp_path {temp}/uwsgi;\n"
        f"    scgi_temp_path {temp}/scgi;\n"
        f"    include {prefix}/site.conf;\n"
        "}\n"
    )
    args = [NGINX, "-p", str(prefix), "-e", str(prefix / "logs" / "error.log"),
            "-c", str(prefix / "nginx.conf")]
    checked = subprocess.run([*args, "-t"], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    proc = subprocess.Popen([*args, "-g", "daemon off;"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "nginx did not listen within 10 s"
            time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=10)
