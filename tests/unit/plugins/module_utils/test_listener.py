# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Who listens on a model's port (issue 45 case 2): the unit's own process or an intruder.

The first tests read a fake /proc (unit/fake_host.FakeProc: net/tcp, net/tcp6,
<pid>/fd, <pid>/cgroup, as the kernel writes them); the last ones read this machine's
real /proc, with a real listening socket held by a child process (under another uid
when the tests run as root).
"""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.health import (
    HttpResult,
    wait_healthy,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import listener

from unit.fake_host import FakeProc

UNIT = "vllm-x.service"
GROUP = f"/system.slice/{UNIT}"
OTHER = "/user.slice/user-4343.slice/session-3.scope"
PORT = 8001


def judged(proc, address="127.0.0.1", group=GROUP, port=PORT):
    return listener.judge(proc, port, address, UNIT, lambda: group)


def unit_listens(address="127.0.0.1", port=PORT):
    proc = FakeProc()
    proc.listen(4242, port, address, 998, GROUP, "vllm")
    return proc


def test_the_units_own_process_is_trusted():
    found = judged(unit_listens())
    assert (found.state, found.trusted, found.refused) == (listener.OWN, True, False)
    assert found.message == (f"port 8001 on 127.0.0.1 is held by {UNIT}'s processes "
                             f"(cgroup {GROUP})")
    assert [(h.pid, h.uid) for h in found.holders] == [(4242, 998)]


def test_a_child_of_the_units_cgroup_is_its_own():
    proc = FakeProc()
    proc.listen(4300, PORT, "127.0.0.1", 998, GROUP + "/engine", "vllm")
    assert judged(proc).state == listener.OWN


def test_an_intruder_is_named_by_pid_uid_comm_and_cgroup():
    proc = FakeProc()
    proc.listen(7777, PORT, "127.0.0.1", 4343, OTHER, "nc")
    found = judged(proc)
    assert (found.state, found.trusted, found.refused) == (listener.INTRUDER, False, True)
    assert found.message == (
        f"port 8001 on 127.0.0.1 is held by pid 7777 (uid 4343, nc, {OTHER}), not by "
        f"{UNIT}'s processes (cgroup {GROUP}): refused")


def test_a_unit_without_processes_owns_no_listener():
    found = judged(unit_listens(), group="")
    assert found.state == listener.INTRUDER
    assert found.message.endswith(f"not by {UNIT}'s processes (cgroup none: it has no "
                                  "processes): refused")


def test_nobody_listening():
    found = judged(FakeProc())
    assert (found.state, found.trusted, found.refused) == (listener.NOBODY, False, False)
    assert found.message == "nothing listens on port 8001 on 127.0.0.1 (/proc/net/tcp, tcp6)"


ANY4 = "0.0.0.0"  # noqa: S104 - an address in /proc's text; nothing binds it


@pytest.mark.parametrize(("intruder", "target", "state"), [
    (ANY4, "127.0.0.1", listener.INTRUDER),   # the IPv4 wildcard takes loopback too
    ("::", "127.0.0.1", listener.INTRUDER),        # dual-stack: v6only is not in /proc
    ("::ffff:127.0.0.1", "127.0.0.1", listener.INTRUDER),
    ("127.0.0.2", "127.0.0.1", listener.OWN),      # another address: none of its connections
    ("::1", "127.0.0.1", listener.OWN),            # IPv6 loopback: not where IPv4 lands
    ("::1", "::1", listener.INTRUDER),             # tcp6
    ("::", "::1", listener.INTRUDER),
    (ANY4, "::1", listener.OWN),
    ("127.0.0.1", "localhost", listener.INTRUDER),  # a name: both loopbacks
    ("10.1.2.3", ANY4, listener.INTRUDER),    # a wildcard target: every address
])
def test_wildcard_loopback_and_tcp6(intruder, target, state):
    proc = unit_listens("::1" if target == "::1" else "127.0.0.1")
    if target == "::1":
        proc.listen(4242, PORT, "127.0.0.1", 998, GROUP)
    proc.listen(7777, PORT, intruder, 4343, OTHER, "nc")
    assert judged(proc, target).state == state


def test_an_intruder_beside_the_units_own_listener_is_still_refused():
    proc = unit_listens(ANY4)
    proc.listen(7777, PORT, "127.0.0.1", 998, OTHER, "python3")  # same uid, other cgroup
    found = judged(proc)
    assert found.state == listener.INTRUDER
    assert "pid 7777 (uid 998, python3, " in found.message


def test_cannot_tell_is_not_trusted_and_says_why():
    """hidepid, or a reader without CAP_SYS_PTRACE: the fds of the holder are refused."""
    proc = FakeProc()
    inode = proc.listen(7777, PORT, "127.0.0.1", 4343, OTHER)
    proc.hidden.add(7777)
    found = judged(proc)
    assert (found.state, found.trusted, found.refused) == (listener.UNKNOWN, False, False)
    assert found.message == (
        f"cannot tell who holds port 8001 on 127.0.0.1: a socket of uid 4343 on 127.0.0.1 "
        f"(inode {inode}); /proc/<pid>/fd of 1 processes could not be read (hidepid, or not "
        f"root with CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE?); wanted {UNIT}'s processes "
        f"(cgroup {GROUP}): not trusted")


def test_fd_links_listed_but_not_readable_say_why():
    """Root in a Docker container (no CAP_SYS_PTRACE) lists another uid's /proc/<pid>/fd but
    readlink is refused: the lab's default scenario waited 600 s on "cannot tell" with no
    reason given (CI, 2026-12-07). Now the reason is said."""
    class NoPtrace(FakeProc):
        def readlink(self, path):
            if path.startswith("7777/fd/"):
                raise PermissionError(13, "Permission denied")
            return super().readlink(path)
    proc = NoPtrace()
    proc.listen(7777, PORT, "127.0.0.1", 4343, OTHER)
    found = judged(proc)
    assert (found.state, found.trusted) == (listener.UNKNOWN, False)
    assert ("/proc/<pid>/fd of 1 processes could not be read (hidepid, or not root with "
            "CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE?)") in found.message


def test_a_legacy_hosts_name_systemd_hierarchy_is_read():
    class Legacy(FakeProc):
        def read(self, path):
            if path.endswith("/cgroup"):
                return f"4:memory:/x\n1:name=systemd:{GROUP}\n"
            return super().read(path)
    proc = Legacy()
    proc.listen(4242, PORT, "127.0.0.1", 998, GROUP)
    assert judged(proc).state == listener.OWN


def test_addresses_decode_as_the_kernel_writes_them():
    assert listener.decode_address("0100007F:1F41", socket.AF_INET) == ("127.0.0.1", 8001)
    # ::1 in host order words, as /proc/net/tcp6 prints it on a little-endian host
    raw = socket.inet_pton(socket.AF_INET6, "::1")
    words = "".join(f"{int.from_bytes(raw[i:i + 4], sys.byteorder):08X}" for i in range(0, 16, 4))
    assert listener.decode_address(f"{words}:1F41", socket.AF_INET6) == ("::1", 8001)


class Clock:
    def __init__(self):
        self.now = 0.0

    def sleep(self, seconds):
        self.now += seconds


def intruder_answers(method, url, payload=None, timeout=10.0):
    """Any vLLM look-alike: /health 200, lists the model, one completion token."""
    if url.endswith("/v1/models"):
        return HttpResult(200, '{"data": [{"id": "m"}]}')
    if url.endswith("/v1/completions"):
        return HttpResult(200, '{"choices": [{"text": "!"}], "usage": {"completion_tokens": 1}}')
    return HttpResult(200, "")


def test_the_gate_without_a_listener_check_passes_an_intruder_and_with_one_refuses_it():
    """Today's gate (no listener) says `ok: 1 completion tokens` to anyone who answers."""
    clock = Clock()
    passed = wait_healthy("http://127.0.0.1:8001", "m", 60, request=intruder_answers,
                          clock=lambda: clock.now, sleep=clock.sleep)
    assert (passed["ok"], passed["detail"]) == (True, "1 completion tokens: '!'")
    proc = FakeProc()
    proc.listen(7777, PORT, "127.0.0.1", 4343, OTHER, "nc")
    refused = wait_healthy("http://127.0.0.1:8001", "m", 60, request=intruder_answers,
                           clock=lambda: clock.now, sleep=clock.sleep,
                           listener=lambda: judged(proc))
    assert (refused["ok"], refused["stage"], refused["attempts"]) == (False, "listener", 1)
    assert "held by pid 7777 (uid 4343, nc" in refused["detail"]


# -- the real /proc of this machine --------------------------------------------------------

SQUATTER_UID = 4343
LISTEN_SCRIPT = ("import socket, sys, time\n"
                 "family = socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET\n"
                 "s = socket.socket(family, socket.SOCK_STREAM)\n"
                 "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                 "s.bind((sys.argv[1], 0))\n"
                 "s.listen()\n"
                 "print(s.getsockname()[1], flush=True)\n"
                 "time.sleep(60)\n")


def _needs_real_proc():
    if not (os.path.exists("/proc/net/tcp") and os.path.exists("/proc/self/cgroup")):
        pytest.skip("this machine's /proc has no net/tcp or <pid>/cgroup")


@contextlib.contextmanager
def real_listener(address="127.0.0.1"):
    """A child process listening on a free port of `address`: (pid, uid, port). Under
    another uid (setpriv) when the tests run as root."""
    argv = [sys.executable, "-S", "-c", LISTEN_SCRIPT, address]
    uid = os.getuid()
    if uid == 0 and shutil.which("setpriv"):
        argv = ["setpriv", f"--reuid={SQUATTER_UID}", f"--regid={SQUATTER_UID}",
                "--clear-groups", *argv]
        uid = SQUATTER_UID
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        if not line.strip():
            pytest.skip(f"could not listen on {address}: {child.stderr.read()[-300:]}")
        yield child.pid, uid, int(line)
    finally:
        child.kill()
        child.wait(timeout=10)


@pytest.mark.parametrize("address", ["127.0.0.1", "::1"])
def test_the_real_proc_names_a_real_listener_of_another_uid(address):
    _needs_real_proc()
    if ":" in address and not os.path.exists("/proc/net/tcp6"):
        pytest.skip("no IPv6 on this machine")
    with real_listener(address) as (pid, uid, port):
        proc = listener.ProcFs()
        found = listener.judge(proc, port, address, UNIT, lambda: GROUP)
        assert found.state == listener.INTRUDER, found.message
        assert [(h.pid, h.uid, h.address) for h in found.holders] == [(pid, uid, address)]
        theirs = listener.process_cgroup(proc, pid)
        comm = proc.read(f"{pid}/comm").strip()
        assert found.message == (
            f"port {port} on {address} is held by pid {pid} (uid {uid}, {comm}, {theirs}), "
            f"not by {UNIT}'s processes (cgroup {GROUP}): refused")
        # the same listener judged against its own cgroup: the unit's own process
        own = listener.judge(proc, port, address, UNIT, lambda: theirs)
        assert own.state == listener.OWN, own.message


PROBE_UNIT = (Path(__file__).resolve().parents[4] / "roles" / "vllm_service" / "templates"
              / "vllm-fleet-probe.service.j2")


def _judge_with_caps(caps, port, address, pid):
    """The listener's verdict on `port`, read by a root process whose capabilities are only
    `caps` (setpriv's bounding set: a root exec keeps no more), as the probe's unit runs."""
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import listener; "
              "found = listener.judge(listener.ProcFs(), int(sys.argv[2]), sys.argv[3], 'u', "
              "lambda: sys.argv[4]); print(found.state)")
    folder = str(Path(listener.__file__).parent)
    bounding = ",".join(["-all", *(f"+{c.lower().removeprefix('cap_')}" for c in caps)])
    done = subprocess.run(["setpriv", f"--bounding-set={bounding}", sys.executable, "-S", "-c",
                           script, folder, str(port), address, f"/pid-{pid}-not-its-group"],
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_probe_units_capabilities_let_it_place_another_uids_listener():
    """The probe's unit keeps only CapabilityBoundingSet's capabilities. With CAP_SYS_PTRACE
    alone root could not list another uid's /proc/<pid>/fd (mode 0500): every probe said
    "cannot tell" and never healthy (Molecule default, 2026-12-07). Read with the unit's
    own set, a listener of another uid is placed (an intruder here: not its cgroup)."""
    _needs_real_proc()
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv(1)")
    line = next(line for line in PROBE_UNIT.read_text().splitlines()
                if line.startswith("CapabilityBoundingSet="))
    caps = line.split("=", 1)[1].split()
    with real_listener() as (pid, uid, port):
        assert uid != 0
        assert _judge_with_caps(caps, port, "127.0.0.1", pid) == listener.INTRUDER
        # and what the unit had before: CAP_SYS_PTRACE alone cannot tell
        assert _judge_with_caps(["CAP_SYS_PTRACE"], port, "127.0.0.1", pid) == listener.UNKNOWN


def test_the_real_proc_says_nobody_on_a_closed_port():
    _needs_real_proc()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, never listening: vLLM while it loads
        port = sock.getsockname()[1]
        found = listener.judge(listener.ProcFs(), port, "127.0.0.1", UNIT, lambda: GROUP)
    assert found.state == listener.NOBODY


# -- the address a listener is reached at from its own host (issue 47: the rule had three
#    Jinja copies: the front door's URL, the balancer's health and stats URLs) ---------------

@pytest.mark.parametrize(("listen", "wanted"), [
    ("0.0.0.0", "127.0.0.1"), ("::", "127.0.0.1"), ("[::]", "127.0.0.1"), ("*", "127.0.0.1"),  # noqa: S104
    ("127.0.0.1", "127.0.0.1"), ("10.0.0.5", "10.0.0.5"), ("lb.example", "lb.example"),
])
def test_a_wildcard_is_reached_through_loopback_an_address_as_it_is(listen, wanted):
    assert listener.local_address(listen) == wanted


@pytest.mark.parametrize("listen", ["", None, 8000])
def test_no_address_is_an_error_that_says_what_was_wanted(listen):
    with pytest.raises(ValueError, match="wanted a listen address"):
        listener.local_address(listen)


def test_the_filter_is_the_function():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.vllm_fleet.fleet.plugins.filter.frontdoor import FilterModule

    local_address = FilterModule().filters()["local_address"]
    assert local_address("0.0.0.0") == "127.0.0.1"  # noqa: S104 - a value, not a bind
    with pytest.raises(AnsibleFilterError, match="local_address: wanted a listen address"):
        local_address("")
