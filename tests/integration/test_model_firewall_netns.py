# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 45 case 1: a model's API port answers root and the front door only.

The guard (roles/vllm_service/templates/vllm-fleet-models.nft.j2, the table
inet vllm_fleet_models, and one port file per model from
vllm-fleet-model-port.nft.j2) is rendered as the role renders it, loaded with
`nft -f` into a network namespace of its own, and probed with real TCP
connections from processes whose uid setpriv(1) sets:

- a second local user (uid 4343: any process of the host, a container on the
  host's network) - refused (TCP reset), on 127.0.0.1 and on the host's own
  other address (that traffic goes through lo too);
- the model user (VLLM_UID stands for `vllm`: another model's unit, which runs
  as that same uid and may run trust_remote_code) - refused;
- the front door's nginx user (www-data, this machine's own account) - accepted;
- root (the cutover, status, the probe) - accepted.

Before the table is loaded, uid 4343 connects (the exposure of issue 45); a
second model's deploy adds its port and keeps the first one's; a port file that
does not load leaves the table as it was; the replica table (inet
vllm_fleet_replicas) loaded beside it still lets the ranks reach their ports.
Needs root, `ip`, `nft` and `setpriv`; skipped with the reason otherwise.
Nothing is loaded into this machine's own namespace; the namespace is deleted
afterwards.
"""

import copy
import json
import os
import pwd
import shutil
import subprocess
import sys
import textwrap

import jinja2
import pytest
from ansible.plugins.filter.core import FilterModule as CoreFilters
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet.multinode import (
    replica_firewall,
    replica_plan,
)
from repo_paths import ROOT
from systemd_unit import tiny_gqa_entry

TEMPLATES = ROOT / "roles" / "vllm_service" / "templates"
VLLM_UID = 4242  # stands for the vllm user: every model's unit runs as it
OTHER_UID = 4343  # any other local user, or a container on the host's network
FRONTDOOR = "www-data"  # vllm_frontdoor_nginx_user's default (Debian's nginx)
FIRST, SECOND, OUTSIDE, MASTER = 8001, 8002, 8003, 29501
HOST_ADDR = "172.31.251.11"  # the host's own address besides loopback (on a veth link)

SERVER = textwrap.dedent("""
    import selectors, socket, sys
    sel = selectors.DefaultSelector()
    for port in map(int, sys.argv[1:]):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port)); s.listen(16)
        sel.register(s, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            conn, _ = key.fileobj.accept(); conn.close()
""")

CLIENT = textwrap.dedent("""
    import json, os, socket, sys
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((sys.argv[1], int(sys.argv[2]))); answer = "accepted"
    except ConnectionRefusedError:
        answer = "refused"
    except (TimeoutError, socket.timeout):
        answer = "timeout"
    print(json.dumps([os.getuid(), answer]))
""")


def _env():
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, autoescape=False)  # noqa: S701
    core = CoreFilters().filters()
    env.filters["comment"] = core["comment"]
    env.filters["to_json"] = core["to_json"]
    return env


def render(template, **values):
    base = {"ansible_managed": "Ansible managed", "vllm_service_user": "vllm",
            "vllm_service_frontdoor_user": FRONTDOOR}
    return _env().from_string((TEMPLATES / template).read_text()).render(**{**base, **values})


def render_guard(ports_dir):
    return render("vllm-fleet-models.nft.j2", __vllm_service_model_ports_dir=str(ports_dir))


def render_port_file(ports_dir, model, port):
    (ports_dir / f"{model}.nft").write_text(render(
        "vllm-fleet-model-port.nft.j2", vllm_service_unit=f"vllm-{model}.service",
        vllm_service_entry={"port": port},
        __vllm_service_model_firewall_file=str(ports_dir.parent / "models.nft")))


def render_replica_table():
    entry = copy.deepcopy(tiny_gqa_entry())
    entry["nodes"] = 2
    entry["serve"]["tensor_parallel_size"] = 2
    lab = [{"name": "lab1", "ip": HOST_ADDR, "interface": "eth0"},
           {"name": "lab2", "ip": "172.31.251.12", "interface": "eth0"}]
    plan = replica_plan(entry, lab, model="tiny_gqa")
    return render("vllm-fleet-replica.nft.j2", vllm_service_user=VLLM_UID,
                  __vllm_service_firewall=replica_firewall(plan, "lab1"))


def _run(*argv, check=True):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=check)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """(the namespace standing for the host, with listeners up; the folder of the rulesets)."""
    missing = [tool for tool in ("ip", "nft", "setpriv") if not shutil.which(tool)]
    if missing or os.geteuid() != 0:
        pytest.skip("needs root, ip, nft and setpriv to make a network namespace "
                    f"(missing: {', '.join(missing) or 'root'})")
    try:
        pwd.getpwnam(FRONTDOOR)
    except KeyError:
        pytest.skip(f"no {FRONTDOOR} user on this machine (Debian's nginx user)")
    ns = f"vf-guard-{os.getpid()}"
    if _run("ip", "netns", "add", ns, check=False).returncode != 0:
        pytest.skip(f"ip netns add {ns} refused here (no network namespaces)")
    server = None
    try:
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        # The host's own second address, on one end of a veth pair (the other end
        # idle): a connection to it from the host itself still goes through lo.
        _run("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
        _run("ip", "-n", ns, "addr", "add", f"{HOST_ADDR}/24", "dev", "eth0")
        for link in ("eth0", "eth1"):
            _run("ip", "-n", ns, "link", "set", link, "up")
        server = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-c", SERVER,
             *map(str, (FIRST, SECOND, OUTSIDE, MASTER))], stdout=subprocess.PIPE, text=True)
        assert server.stdout.readline().strip() == "ready"
        folder = tmp_path_factory.mktemp("vllm-fleet")
        (folder / "models.d").mkdir()
        yield ns, folder
    finally:
        if server:
            server.kill()
            server.wait()
        _run("ip", "netns", "delete", ns, check=False)


def connect(ns, port, uid=0, address="127.0.0.1"):
    """Connect to address:port in the namespace as uid (setpriv: no groups, gid = uid)."""
    who = [] if uid == 0 else ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    run = _run("ip", "netns", "exec", ns, *who, sys.executable, "-c", CLIENT, address, str(port))
    got_uid, answer = json.loads(run.stdout)
    assert got_uid == uid
    return answer


def load(ns, folder):
    guard = folder / "models.nft"
    guard.write_text(render_guard(folder / "models.d"))
    _run("ip", "netns", "exec", ns, "nft", "-c", "-f", str(guard))
    return _run("ip", "netns", "exec", ns, "nft", "-f", str(guard), check=False)


def listed(ns):
    return _run("ip", "netns", "exec", ns, "nft", "list", "table", "inet",
                "vllm_fleet_models").stdout


@pytest.fixture(scope="module")
def guarded(host):
    """The first model's deploy: its port file, the guard loaded."""
    ns, folder = host
    # Today's host, with no guard: any local user reaches the model's port (issue 45).
    unguarded = connect(ns, FIRST, uid=OTHER_UID)
    render_port_file(folder / "models.d", "tiny_gqa", FIRST)
    loaded = load(ns, folder)
    assert loaded.returncode == 0, loaded.stderr
    return ns, folder, unguarded


def test_without_the_guard_a_second_uid_reaches_the_models_port(guarded):
    assert guarded[2] == "accepted"


def test_the_table_holds_the_models_port_and_root_and_the_front_door(guarded):
    text = listed(guarded[0])
    assert "elements = { 8001 }" in text
    assert f"elements = {{ 0, {pwd.getpwnam(FRONTDOOR).pw_uid} }}" in text


@pytest.mark.parametrize("address", ["127.0.0.1", HOST_ADDR])
def test_a_second_uid_is_refused_on_the_models_port(guarded, address):
    assert connect(guarded[0], FIRST, uid=OTHER_UID, address=address) == "refused"


@pytest.mark.parametrize("address", ["127.0.0.1", HOST_ADDR])
def test_another_models_unit_is_refused_on_the_models_port(guarded, address):
    # Every model's unit runs as the vllm user: its uid is refused too.
    assert connect(guarded[0], FIRST, uid=VLLM_UID, address=address) == "refused"


def test_the_front_door_and_root_reach_the_models_port(guarded):
    ns = guarded[0]
    assert connect(ns, FIRST, uid=pwd.getpwnam(FRONTDOOR).pw_uid) == "accepted"
    assert connect(ns, FIRST, uid=0) == "accepted"


def test_a_port_no_model_uses_stays_open(guarded):
    assert connect(guarded[0], OUTSIDE, uid=OTHER_UID) == "accepted"


def test_a_second_models_deploy_adds_its_port_and_keeps_the_first(guarded):
    ns, folder = guarded[:2]
    assert connect(ns, SECOND, uid=OTHER_UID) == "accepted"
    render_port_file(folder / "models.d", "other_model", SECOND)
    # Two models on one port (blue and green of a cold switch): one element.
    render_port_file(folder / "models.d", "same_port", FIRST)
    loaded = load(ns, folder)
    assert loaded.returncode == 0, loaded.stderr
    assert "elements = { 8001, 8002 }" in listed(ns)
    for port in (FIRST, SECOND):
        assert connect(ns, port, uid=OTHER_UID) == "refused"
        assert connect(ns, port, uid=VLLM_UID) == "refused"
        assert connect(ns, port, uid=pwd.getpwnam(FRONTDOOR).pw_uid) == "accepted"


def test_a_port_file_that_does_not_load_leaves_the_table_as_it_was(guarded):
    ns, folder = guarded[:2]
    before = listed(ns)
    broken = folder / "models.d" / "broken.nft"
    broken.write_text("add element inet vllm_fleet_models model_ports { not-a-port }\n")
    try:
        guard = folder / "models.nft"
        assert _run("ip", "netns", "exec", ns, "nft", "-f", str(guard),
                    check=False).returncode != 0
        assert listed(ns).replace("packets", "").split("counter")[0] == before.replace(
            "packets", "").split("counter")[0]
        assert connect(ns, FIRST, uid=OTHER_UID) == "refused"
    finally:
        broken.unlink()


def test_the_replica_ranks_still_reach_their_ports_beside_the_guard(guarded):
    # A replica's head on this host: both tables loaded. The ranks (the vllm user)
    # reach the replica's ports, not the models' API ports; another uid neither.
    ns, folder = guarded[:2]
    replica = folder / "replica.nft"
    replica.write_text(render_replica_table())
    _run("ip", "netns", "exec", ns, "nft", "-f", str(replica))
    try:
        for address in ("127.0.0.1", HOST_ADDR):
            assert connect(ns, MASTER, uid=VLLM_UID, address=address) == "accepted"
            assert connect(ns, MASTER, uid=OTHER_UID, address=address) == "refused"
            assert connect(ns, FIRST, uid=VLLM_UID, address=address) == "refused"
            assert connect(ns, FIRST, uid=0, address=address) == "accepted"
    finally:
        _run("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "vllm_fleet_replicas")
