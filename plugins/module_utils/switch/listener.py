# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Who listens on a model's port: the unit's own processes, or someone else (stdlib only).

vLLM binds its port (SO_REUSEADDR) before it builds its engine and listens only once the
model has loaded (issue 45, case 2). Meanwhile a socket of any uid can bind the same port and
listen first; it then answers the health gate, and the front door would send it every keyed
client's prompts. So nothing is trusted on a model's endpoint but a listener whose process
is in the unit's cgroup (systemd's ControlGroup).

Read from /proc, as the kernel keeps it (not `ss`, whose output varies by version):
  /proc/net/tcp, /proc/net/tcp6  the LISTEN sockets (state 0A): address, port, uid, inode
  /proc/<pid>/fd/*               links `socket:[inode]`: which processes hold that socket
  /proc/<pid>/cgroup             where each holder lives ("0::/system.slice/x.service")
  /proc/<pid>/comm               its name, for the message
The module runs on the managed host as root, which sees every process even where /proc is
mounted with hidepid. `proc` (ProcFs, or a fake host's) is what reads them.

Out of scope: a model served on a Unix socket (vLLM's --uds; the product refuses it,
serve_args.PRODUCT_OPTIONS), and a process inside the unit's own cgroup (docs/security.md).
"""

import ipaddress
import os
import socket
import struct
import urllib.parse

PROC_ROOT = "/proc"
LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column
# Verdicts: the unit's own processes listen; someone else does; nobody does; cannot tell.
OWN, INTRUDER, NOBODY, UNKNOWN = "own", "intruder", "nobody", "unknown"
# Columns of a /proc/net/tcp line: sl, local_address, rem_address, st, ..., uid (7), inode (9)
LOCAL, STATE, UID, INODE = 1, 3, 7, 9
TABLES = (("net/tcp", socket.AF_INET), ("net/tcp6", socket.AF_INET6))
WORD_HEX = 8  # /proc/net/tcp6 prints an address as four 32-bit words in host order


class ProcFs:
    """/proc (or a copy under `root`) through three calls; each raises OSError as os does."""

    def __init__(self, root=None):
        self.root = root or PROC_ROOT

    def _path(self, path):
        return os.path.join(self.root, path)

    def read(self, path):
        with open(self._path(path), encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def listdir(self, path=""):
        return os.listdir(self._path(path))

    def readlink(self, path):
        return os.readlink(self._path(path))


def live_proc():
    """The host's own /proc (what a Host reads unless it is given another)."""
    return ProcFs(PROC_ROOT)


class Holder:
    """A process that holds a listening socket: pid, the socket's uid and address, the
    process's cgroup (None: unreadable) and comm."""

    def __init__(self, pid, uid, address, cgroup, comm):
        self.pid, self.uid, self.address = pid, uid, address
        self.cgroup, self.comm = cgroup, comm

    def describe(self):
        where = self.cgroup if self.cgroup is not None else "cgroup unreadable"
        return f"pid {self.pid} (uid {self.uid}, {self.comm or '?'}, {where})"


class Listening:
    """The verdict on a port: `state` (OWN, INTRUDER, NOBODY, UNKNOWN), `message` saying what
    was wanted and found, `holders` (Holder) and whether an answer there may be `trusted`."""

    def __init__(self, state, message, holders=()):
        self.state = state
        self.message = message
        self.holders = list(holders)

    @property
    def trusted(self):
        return self.state == OWN

    @property
    def refused(self):
        """Someone else holds the port: the gate fails at once (waiting will not mend it)."""
        return self.state == INTRUDER


def decode_address(text, family):
    """A /proc/net/tcp{,6} address ("0100007F:1F41") as (ip text, port)."""
    hex_addr, _sep, hex_port = text.partition(":")
    words = [hex_addr[i:i + WORD_HEX] for i in range(0, len(hex_addr), WORD_HEX)]
    raw = b"".join(struct.pack("=I", int(word, 16)) for word in words)
    return socket.inet_ntop(family, raw), int(hex_port, 16)


def listening_sockets(proc, port):
    """([(ip, uid, inode)] of the LISTEN sockets on TCP `port`, problems): each table that
    cannot be read is a problem (tcp6 may be absent on a host without IPv6: not one)."""
    found, problems = [], []
    for table, family in TABLES:
        try:
            text = proc.read(table)
        except FileNotFoundError:
            if family == socket.AF_INET:
                problems.append(f"/proc/{table} is missing")
            continue
        except OSError as exc:
            problems.append(f"/proc/{table}: {exc.strerror or exc}")
            continue
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) <= INODE or fields[STATE] != LISTEN:
                continue
            address, bound = decode_address(fields[LOCAL], family)
            if bound == port:
                found.append((address, int(fields[UID]), int(fields[INODE])))
    return found, problems


def _targets(address):
    """The listener addresses a connection to `address` may reach: itself, its family's
    wildcard and, for IPv4, its IPv4-mapped form and IPv6's wildcard (a dual-stack socket
    takes IPv4 too; whether it is v6-only is not in /proc/net/tcp6, so it counts). None:
    every address (a wildcard or a name that is not an address)."""
    names = {"localhost": ("127.0.0.1", "::1")}.get(address, (address,))
    wanted = set()
    for name in names:
        try:
            ip = ipaddress.ip_address(name)
        except ValueError:
            return None
        if ip.is_unspecified:
            return None
        if ip.version == 4:  # noqa: PLR2004 - the IP version
            wanted |= {str(ip), "0.0.0.0", f"::ffff:{ip}", "::"}  # noqa: S104 - matched, not bound
        else:
            wanted |= {str(ip), "::"}
    return wanted


def relevant(sockets, address):
    """The sockets of `sockets` that could take a connection to `address` (see _targets);
    a listener on another specific address of the port gets none of it."""
    wanted = _targets(address)
    return [s for s in sockets if wanted is None or s[0] in wanted]


def socket_owners(proc, inodes):
    """({inode: [pid]}, pids whose fds could not be read): who holds each socket inode."""
    owners = {inode: [] for inode in inodes}
    links = {f"socket:[{inode}]": inode for inode in inodes}
    unreadable = []
    try:
        entries = proc.listdir("")
    except OSError:
        return owners, ["/proc"]
    for entry in sorted((e for e in entries if e.isdigit()), key=int):
        try:
            fds = proc.listdir(f"{entry}/fd")
        except FileNotFoundError:
            continue  # it exited meanwhile
        except OSError:
            unreadable.append(entry)
            continue
        for fd in fds:
            try:
                target = proc.readlink(f"{entry}/fd/{fd}")
            except FileNotFoundError:
                continue  # closed meanwhile
            except OSError:  # listed but not readable: another uid's, without CAP_SYS_PTRACE
                unreadable.append(entry)
                break
            if target in links and int(entry) not in owners[links[target]]:
                owners[links[target]].append(int(entry))
    return owners, unreadable


def process_cgroup(proc, pid):
    """The cgroup `pid` lives in, as systemd names it (cgroup v2's "0::" line, or the
    name=systemd hierarchy of a legacy host); None when it cannot be read."""
    try:
        text = proc.read(f"{pid}/cgroup")
    except OSError:
        return None
    legacy = None
    for line in text.splitlines():
        hierarchy, _sep, rest = line.partition(":")
        controllers, _sep, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            return path
        if "name=systemd" in controllers.split(","):
            legacy = path
    return legacy


def _comm(proc, pid):
    try:
        return proc.read(f"{pid}/comm").strip()
    except OSError:
        return None


def inside(cgroup, group):
    """Whether the cgroup path `cgroup` is the unit's `group` or below it."""
    if not cgroup or not group:
        return False
    top = group.rstrip("/")
    return cgroup == top or cgroup.startswith(top + "/")


def judge(proc, port, address, unit, group_of_unit):
    """Listening: who listens where a connection to `address`:`port` lands, against the
    unit's cgroup (`group_of_unit()`, systemd's ControlGroup; read only when someone
    listens; "" when the unit has no processes: then no listener is its own).

    Cannot tell (UNKNOWN) is never trusted: a listener whose process cannot be found (its
    /proc/<pid>/fd unreadable: hidepid without root; or it exited between the reads) or
    whose cgroup cannot be read may be anyone's. It is not refused at once either: it can be
    a race the next look settles, so the gate keeps looking until its timeout.
    """
    where = f"port {port} on {address}"
    sockets, problems = listening_sockets(proc, port)
    if problems:
        return Listening(UNKNOWN, f"cannot tell who listens on {where}: "
                         f"{'; '.join(problems)}: not trusted")
    sockets = relevant(sockets, address)
    if not sockets:
        return Listening(NOBODY, f"nothing listens on {where} (/proc/net/tcp, tcp6)")
    group = group_of_unit() or ""
    owners, unreadable = socket_owners(proc, [inode for _a, _u, inode in sockets])
    holders, lost = [], []
    for address_of, uid, inode in sockets:
        holders.extend(Holder(pid, uid, address_of, process_cgroup(proc, pid), _comm(proc, pid))
                       for pid in owners[inode])
        if not owners[inode]:
            lost.append(f"a socket of uid {uid} on {address_of} (inode {inode})")
    return _verdict(where, unit, group, holders, lost, unreadable)


def _verdict(where, unit, group, holders, lost, unreadable):
    ours = f"{unit}'s processes (cgroup {group or 'none: it has no processes'})"
    strangers = [h for h in holders if h.cgroup is not None and not inside(h.cgroup, group)]
    if strangers:
        named = ", ".join(h.describe() for h in strangers)
        return Listening(INTRUDER, f"{where} is held by {named}, not by {ours}: refused",
                         holders)
    unsure = [h.describe() for h in holders if h.cgroup is None] + lost
    if unsure:
        why = (f"; /proc/<pid>/fd of {len(unreadable)} processes could not be read (hidepid, "
               "or not root with CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE?)" if unreadable else "")
        return Listening(UNKNOWN, f"cannot tell who holds {where}: {', '.join(unsure)}{why}; "
                         f"wanted {ours}: not trusted", holders)
    return Listening(OWN, f"{where} is held by {ours}", holders)


def url_endpoint(url):
    """(address, port) a URL connects to; port None when it names none and no scheme
    default applies."""
    parts = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.hostname or "", parts.port or default


# The addresses that bind every interface, as the roles' listen settings spell them.
WILDCARDS = ("0.0.0.0", "::", "[::]", "*")  # noqa: S104 - matched, not bound


def local_address(listen):
    """The address a client on the same host reaches a listener bound to `listen` at:
    loopback for a wildcard (0.0.0.0, ::, [::], *), else the address itself. The front
    door's URL and the balancer's own URLs are built from it."""
    if not isinstance(listen, str) or not listen:
        raise ValueError(f"wanted a listen address such as 0.0.0.0 or 10.0.0.5, got {listen!r}")
    return "127.0.0.1" if listen in WILDCARDS else listen
