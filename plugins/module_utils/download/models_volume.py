# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The models volume as it really is: which lock it gives, whether it links, who stages.

A models volume is often a network filesystem that several hosts mount. What
the download relies on differs between them:

- ``flock`` may be missing (Lustre mounted without ``-o flock``: ENOSYS), may
  hold only on the host that took it (NFS with ``local_lock=flock|all``, NFSv3
  with ``nolock``, BeeGFS by default, FUSE filesystems whose daemon does not
  implement locks: the kernel then emulates them locally), or hold across
  hosts (NFS without local_lock, Lustre with ``-o flock``, CephFS, GPFS);
- hard links may fail (vfat/exFAT, SMB shares without Unix extensions, some
  FUSE filesystems): a file two revisions share is then copied, not linked,
  and the disk plan must count the copy.

So the download takes ``flock`` where the filesystem has it (it keeps two runs
on one host apart) and, when the volume is shared by hosts
(``vllm_fleet_models_volume``) or flock is missing, a **lease file** beside it:
created with ``O_CREAT|O_EXCL`` (atomic on NFSv3+, Lustre, BeeGFS, CephFS, SMB),
renewed by its holder every ``lease_s / 4`` (mtime), and taken over by a waiter
only after it saw the holder's mtime stand still for ``lease_s`` of its own
clock (no clock shared between hosts is assumed), or at once when the holder
is a process of this very host (same boot) that no longer exists.

Nothing on the volume is followed or trusted (other users and hosts can write
there): the lease is created with ``O_EXCL|O_NOFOLLOW`` and renewed through the
holder's own descriptor (never a path that may have become a link), read as a
regular file of at most ``STATE_LIMIT`` bytes (a link, a FIFO, a device or a
larger file is refused by name, see `read_state`), renewed only while the
holder still owns it and its work moves (`progress`, `stall_s`), and waited for
at most ``wait_s`` seconds, the error naming the holder (host, pid, since).

The fleet side: hosts that name the same volume stage a model once; the first
host of each volume in the play's batch is its stager (`stagers`).
"""

from __future__ import absolute_import, division, print_function

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import threading
import time

__metaclass__ = type

LOCK_UNSUPPORTED = (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK)
# Filesystems only one host mounts (a shared block device needs a cluster filesystem).
LOCAL_FS = frozenset((
    "ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "tmpfs", "f2fs", "overlay", "jfs",
    "reiserfs", "bcachefs",
))
# Filesystems whose hard links are known to work (POSIX semantics).
LINKS_OK = LOCAL_FS | frozenset((
    "nfs", "nfs4", "lustre", "beegfs", "ceph", "gpfs", "gfs2", "ocfs2", "fuse.juicefs",
))
# Filesystems without hard links (link(2) answers EPERM or EOPNOTSUPP).
# (fuseblk is exFAT's FUSE driver as well as ntfs-3g's, which links: not known.)
LINKS_NEVER = frozenset(("vfat", "msdos", "exfat", "fuse.exfat"))
LEASE_NAME = "lease"
# A state file (lease, volume record) is a few hundred bytes; more is not ours.
STATE_LIMIT = 64 * 1024
_KINDS = (
    (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


class VolumeError(Exception):
    """The volume cannot do what the download needs; the message says what and why."""


class LeaseWaitError(VolumeError):
    """The lease stayed with another holder past the wait's deadline."""


def kind_of(mode):
    """'a FIFO', 'a symbolic link', ... for a stat mode; 'a regular file' for one."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def not_a_folder(root, relpath):
    """'PATH is a FIFO' (kind_of) for the first of `relpath`'s folders under `root` that is
    something else, links not followed; None while each is a folder (or is not there yet)."""
    path = root
    for part in relpath.split(os.sep):
        path = os.path.join(path, part)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(mode):
            return "%s is %s" % (path, kind_of(mode))
    return None


def open_nofollow(path, flags, mode=0o644, one_link=True):
    """os.open with O_NOFOLLOW (and O_NONBLOCK, so a FIFO never blocks the open), then
    fstat: the descriptor of a regular file (with one link when `one_link`: a file this
    code writes), else VolumeError naming what was found. Nothing is truncated here:
    callers truncate the checked descriptor."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise VolumeError("%s is a symbolic link: nothing on the volume is followed; "
                              "remove it (someone else put it there)" % path) from e
        if e.errno == errno.ENXIO:
            raise VolumeError("%s is a FIFO or socket, not a regular file: remove it (someone "
                              "else put it there)" % path) from e
        raise
    try:
        _check_regular(fd, path, one_link)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_regular(fd, path, one_link):
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise VolumeError("%s is %s, not a regular file: remove it (someone else put it "
                          "there)" % (path, kind_of(st.st_mode)))
    if one_link and st.st_nlink > 1:
        raise VolumeError("%s has %d hard links, a file the download writes has one: "
                          "remove it (it may be another file's name)" % (path, st.st_nlink))


def read_state(path, limit=STATE_LIMIT):
    """The bytes of a state file: a regular file, not a link, of at most `limit` bytes.

    FileNotFoundError when it is absent; VolumeError naming the path and what it is when it
    is a link, a FIFO, a device, a folder or larger than `limit` (nothing past `limit` + 1
    bytes is read)."""
    fd = open_nofollow(path, os.O_RDONLY, one_link=False)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise VolumeError("%s is %d bytes, a state file is at most %d: refused; remove it "
                              "(it is not the download's)" % (path, size, limit))
        chunks, got = [], 0
        while got <= limit:
            chunk = os.read(fd, limit + 1 - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise VolumeError("%s grew past %d bytes while read: refused" % (path, limit))
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_json_state(path, limit=STATE_LIMIT):
    """read_state, parsed as JSON: {} when absent or not JSON (a file being written);
    VolumeError when it is not a regular file or too large."""
    try:
        data = json.loads(read_state(path, limit).decode("utf-8"))
    except FileNotFoundError:
        return {}
    except (UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# -- mounts -------------------------------------------------------------------

def _unescape(field):
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 ...)."""
    out, i = [], 0
    while i < len(field):
        code = field[i + 1:i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():  # noqa: PLR2004
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text):
    """[{mount_point, fstype, source, options}] from /proc/<pid>/mountinfo (proc(5)).

    `options` joins the per-mount and the superblock options (NFS's local_lock,
    Lustre's flock are superblock options)."""
    mounts = []
    for line in text.splitlines():
        if " - " not in line:
            continue
        left, right = line.split(" - ", 1)
        lf, rf = left.split(), right.split()
        if len(lf) < 6 or len(rf) < 2:  # noqa: PLR2004 - proc(5)'s fields
            continue
        options = set(lf[5].split(","))
        if len(rf) > 2:  # noqa: PLR2004
            options |= set(rf[2].split(","))
        mounts.append({
            "mount_point": _unescape(lf[4]),
            "fstype": rf[0],
            "source": _unescape(rf[1]),
            "options": sorted(o for o in options if o),
        })
    return mounts


def parse_mount_output(text):
    """The same records from `mount`'s lines, ``<source> on <point> type <fs> (<options>)``:
    what people post in bug reports and support bundles."""
    mounts = []
    for raw in text.splitlines():
        line = raw.strip()
        if " on " not in line or " type " not in line:
            continue
        source, rest = line.split(" on ", 1)
        point, rest = rest.rsplit(" type ", 1)
        fstype, _sep, opts = rest.partition(" ")
        opts = opts.strip().lstrip("(").rstrip(")")
        mounts.append({
            "mount_point": point, "fstype": fstype, "source": source,
            "options": sorted(o for o in opts.split(",") if o),
        })
    return mounts


def mount_for(path, mounts):
    """The mount holding `path` (longest mount point that is a prefix; the last one listed
    wins among equals, as the kernel stacks them); None when none does."""
    path = os.path.normpath(path)
    best = None
    for m in mounts:
        point = os.path.normpath(m["mount_point"])
        inside = point in (path, "/") or path.startswith(point + "/")
        if inside and (best is None or len(point) >= len(best["mount_point"])):
            best = dict(m, mount_point=point)
    return best


def _option(mount, name):
    for opt in mount.get("options", []):
        if opt == name:
            return True
        if opt.startswith(name + "="):
            return opt.split("=", 1)[1]
    return None


def lock_scope(mount):  # noqa: C901, PLR0911 - one answer per filesystem
    """(scope, why): where an flock taken on this mount holds.

    scope is "host-only-fs" (a local filesystem: no other host mounts it), "hosts" (the
    filesystem's server keeps the lock for every client), "this-host" (the lock holds only
    on the host that took it), "none" (flock is refused) or "unknown"."""
    if not mount:
        return "unknown", "no mount found for the path"
    fs = mount["fstype"]
    if fs in LOCAL_FS:
        return "host-only-fs", "%s is a local filesystem" % fs
    if fs in ("nfs", "nfs4"):
        local = _option(mount, "local_lock")
        if local in ("flock", "all"):
            return "this-host", ("NFS mounted with local_lock=%s: flock is kept by this client "
                                 "only" % local)
        if _option(mount, "nolock"):
            return "this-host", "NFS mounted with nolock: locks are kept by this client only"
        return "hosts", "NFS without local_lock: flock is a lock on the server (nfs(5))"
    if fs == "lustre":
        if _option(mount, "flock"):
            return "hosts", "Lustre mounted with -o flock: locks are coherent across clients"
        if _option(mount, "localflock"):
            return "this-host", "Lustre mounted with -o localflock: locks hold on this client only"
        return "none", "Lustre mounted without -o flock: flock answers ENOSYS"
    if fs == "beegfs":
        return "this-host", ("BeeGFS keeps locks on the client unless tuneUseGlobalFileLocks is "
                             "set in beegfs-client.conf")
    if fs in ("ceph", "gpfs", "gfs2", "ocfs2", "fuse.juicefs"):
        return "hosts", "%s keeps flock coherent across its clients" % fs
    if fs.startswith("fuse"):
        return "this-host", ("%s: the kernel keeps flock locally unless the FUSE daemon "
                             "implements locks" % fs)
    return "unknown", "%s: how far its locks reach is not known" % fs


def hard_links(mount):
    """True / False / None (not known) for hard links on this mount's filesystem."""
    if not mount:
        return None
    fs = mount["fstype"]
    if fs in LINKS_NEVER:
        return False
    if fs in LINKS_OK:
        return True
    if fs in ("cifs", "smb3"):
        return None  # the server decides (Windows NTFS: yes; Unix extensions off: often not)
    return None


def read_mounts(read_text=None):
    """The mounts of this process's namespace (reads /proc/self/mountinfo)."""
    if read_text is None:
        def read_text(path):
            with open(path) as f:
                return f.read()
    try:
        return parse_mountinfo(read_text("/proc/self/mountinfo"))
    except OSError:
        return []


# -- locks ----------------------------------------------------------------------

def probe_flock(path, flock=fcntl.flock):
    """None when flock works on the filesystem holding `path`, else the error text.

    Read-only: takes and drops a shared lock on the nearest existing folder."""
    while not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return "cannot open %s: %s" % (path, e.strerror)
    try:
        flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        flock(fd, fcntl.LOCK_UN)
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            return None  # works: somebody holds it exclusively
        return "[Errno %d] %s" % (e.errno, e.strerror)
    finally:
        os.close(fd)
    return None


def _boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LeaseLock(object):
    """An exclusive lock across hosts: a lease file made with O_EXCL and kept fresh.

    `clock` and `sleep` are injectable (tests); `on_wait(holder, waited_s)` is told while
    it waits, with the holder's record (host, pid, since). `wait_s` bounds the wait (None:
    no bound): past it, LeaseWaitError names the holder. `progress` (set before or after
    acquire) is a callable whose value changes while the holder's work moves: the heartbeat
    stops renewing once it stood still for `stall_s`, so a hung holder's lease expires."""

    def __init__(self, path, lease_s=60.0, poll_s=2.0, clock=time.monotonic, sleep=time.sleep,
                 on_wait=None, host=None, wait_s=None, progress=None, stall_s=None):
        self.path = path
        self.lease_s = float(lease_s)
        self.poll_s = float(poll_s)
        self.wait_s = None if wait_s is None else float(wait_s)
        self.progress = progress
        self.stall_s = float(stall_s) if stall_s is not None else 10 * self.lease_s
        self.lost = None
        self._fd = None
        self.clock = clock
        self.sleep = sleep
        self.on_wait = on_wait
        self.host = host or socket.gethostname()
        self.record = {
            "host": self.host,
            "pid": os.getpid(),
            "boot_id": _boot_id(),
            "since": time.time(),
            "lease_s": self.lease_s,
        }
        self.token = "%s:%d:%f" % (self.host, os.getpid(), self.record["since"])
        self.record["token"] = self.token
        self.broke = []
        self._guard_seen = None
        self._stop = threading.Event()
        self._thread = None

    def _read(self):
        """The holder's record: {} when there is none or it is being written; VolumeError
        when the lease is a link, a FIFO, a device or larger than STATE_LIMIT."""
        try:
            return read_json_state(self.path)
        except VolumeError as e:
            raise VolumeError("the lease: %s" % e) from e
        except OSError:
            return {}

    def _try_create(self):
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            return False
        except OSError as e:
            raise VolumeError("cannot create the lease file %s: %s" % (self.path, e)) from e
        os.write(fd, json.dumps(self.record).encode())
        os.fsync(fd)
        self._fd = fd  # renewed through this descriptor: always our own file
        return True

    def _dead_here(self, holder):
        """The holder is a process of this host, this boot, that is gone."""
        return (holder.get("host") == self.host and holder.get("boot_id") == self.record["boot_id"]
                and isinstance(holder.get("pid"), int) and not _pid_alive(holder["pid"]))

    def _break(self, holder, why):
        """Remove a stale lease, one breaker at a time: the breaker holds `<lease>.break`
        (O_EXCL) while it reads the lease again and removes it only if it still is the stale
        one. No rename or link (exFAT and SMB without Unix extensions have no links), so a
        waiter that judged the lease stale after another broke it and took a new one finds
        the new token and leaves it."""
        guard = self.path + ".break"
        try:
            fd = os.open(guard, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            self._clear_stale_guard(guard)
            return False
        except OSError:
            return False
        os.close(fd)
        try:
            if self._read().get("token") != holder.get("token"):
                return True  # a new holder since: look again at once
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)
            self.broke.append(dict(holder, why=why))
            return True
        finally:
            with contextlib.suppress(OSError):
                os.remove(guard)

    def _clear_stale_guard(self, guard):
        """A breaker that died between its guard and its removal: its guard stands still."""
        try:
            mtime = os.lstat(guard).st_mtime_ns
        except FileNotFoundError:
            return
        now = self.clock()
        if self._guard_seen is None or self._guard_seen[0] != mtime:
            self._guard_seen = (mtime, now)
        elif now - self._guard_seen[1] >= self.lease_s:
            with contextlib.suppress(FileNotFoundError):
                os.remove(guard)
            self._guard_seen = None

    def _wait_error(self, holder, waited, renewed_ago):
        since = holder.get("since")
        try:
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(since)))
        except (TypeError, ValueError, OverflowError):
            when = "an unknown time"
        return LeaseWaitError(
            "waited %.0f s (the wait's bound) for the lease %s, held by host %s, pid %s since "
            "%s, renewed %.0f s ago: that host is still staging this repo; let it finish, or "
            "stop it (a lease that is not renewed for %.0f s is taken over)"
            % (waited, self.path, holder.get("host", "?"), holder.get("pid", "?"), when,
               renewed_ago, self.lease_s))

    def acquire(self):
        """Wait for the lease; returns seconds waited."""
        t0 = self.clock()
        seen_mtime, seen_at, seen_token = None, None, None
        while True:
            if self._try_create():
                self._start_heartbeat()
                return self.clock() - t0
            holder = self._read()
            try:
                mtime = os.lstat(self.path).st_mtime_ns
            except FileNotFoundError:
                continue
            now = self.clock()
            if holder.get("token") != seen_token or mtime != seen_mtime:
                seen_mtime, seen_at, seen_token = mtime, now, holder.get("token")
            if self._dead_here(holder) and self._break(
                    holder, "its process %s on this host is gone" % holder.get("pid")):
                continue
            if now - seen_at >= self.lease_s and self._break(
                    holder, "its lease was not renewed for %.0f s" % (now - seen_at)):
                continue
            if self.wait_s is not None and now - t0 >= self.wait_s:
                raise self._wait_error(holder, now - t0, now - seen_at)
            if self.on_wait:
                self.on_wait(holder, now - t0)
            self.sleep(self.poll_s)

    def renew(self, state):
        """One heartbeat: renew (the mtime of our own descriptor) only while the lease file is
        still ours and the work moved within `stall_s`; else set `lost` and return False.
        `state` is the heartbeat's {"mark", "at"} of the last progress seen."""
        if self.progress is not None:
            mark, now = self.progress(), self.clock()
            if state.get("at") is None or mark != state.get("mark"):
                state.update(mark=mark, at=now)
            elif now - state["at"] >= self.stall_s:
                self.lost = ("no progress for %.0f s: the lease is no longer renewed and "
                             "expires for the next stager" % (now - state["at"]))
                return False
        try:
            holder = self._read()
        except VolumeError as e:
            holder = {"why": str(e)}
        if not holder and not os.path.lexists(self.path):
            self.lost = "the lease file is gone (another stager took it over)"
            return False
        if holder and holder.get("token") != self.token:
            self.lost = "the lease is no longer ours (%s)" % (
                holder.get("why") or "held by %s pid %s" % (holder.get("host"), holder.get("pid")))
            return False
        with contextlib.suppress(OSError):
            os.utime(self._fd)
        return True

    def _start_heartbeat(self):
        def beat():
            state = {}
            while not self._stop.wait(self.lease_s / 4):
                if not self.renew(state):
                    return
        self._thread = threading.Thread(target=beat, name="lease-heartbeat", daemon=True)
        self._thread.start()

    def release(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        with contextlib.suppress(VolumeError):
            if self._read().get("token") == self.token:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self.path)

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()
        return False


# -- the fleet: one stager per volume ------------------------------------------------

def stagers(batch, volume_of):
    """{host: stager} for the hosts of `batch` (play order): hosts that name the same
    volume are staged by the first of them; a host without a volume stages for itself."""
    first, out = {}, {}
    for host in batch:
        volume = (volume_of.get(host) or "").strip()
        if not volume:
            out[host] = host
            continue
        out[host] = first.setdefault(volume, host)
    return out
