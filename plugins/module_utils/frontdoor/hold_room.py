# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The front door's waiting room: requests that arrive during a warm switch wait here, then
are served by whichever model serves after it (issue 44, case 6).

A warm return's outage is sleep + wake + gate: 0.5-1 s in the lab, about 1.1-1.6 s on a
GPU after a model's first sleep (bench/output/gpu/). Answering every request in it 503 +
Retry-After fails requests a client would rather have waited a second for (the lab: 8-20
of ~850 per warm return). nginx cannot wait on its own, and a request it holds across a
reload keeps the old worker's upstream (blue, asleep): so the wait happens here, and the
answer tells nginx where to send the request now, not its upstream block.

The path of a request during a warm hold (roles/vllm_frontdoor/templates/vllm-fleet.conf.j2):
the route's `if (-f hold_file)` answers 503 -> `@vllm_switching`: when this room's socket
exists nginx reads the whole body (kept; it is not sent here) and proxies the head to the
room, which answers when the switch ends:

- 409 with `X-Vllm-Fleet-Upstream: 127.0.0.1:<port>` once the switch points the front door
  at a model (green, or blue after a rollback): nginx's `@vllm_after_hold` sends the kept
  request there (`proxy_pass http://$target`, the address checked by a map);
- 503 when the switch ends with nothing serving, when the room closes (a switch that fell
  back to cold, or the cutover's end), or once `max_s` has passed since the hold began:
  nginx answers the hold's 503 + Retry-After.

A request with the header `X-Vllm-Fleet-Hold: check` is answered 503 at once and not
counted: the cutover's own check that the hold is in force. The room lives in the cutover's
process; when that process dies the socket refuses and nginx answers 503 at once.
"""

import contextlib
import os
import pwd
import socket
import socketserver
import stat
import statistics
import struct
import threading
import time

try:
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.errors import FieldsError
except ImportError:  # on the host: shipped beside the probe (roles/vllm_service/tasks/probe.yml)
    from errors import FieldsError  # type: ignore[no-redef]

CHECK_HEADER = b"x-vllm-fleet-hold"
TARGET_HEADER = "X-Vllm-Fleet-Upstream"
RELEASED = 409  # nginx's error_page sends the request on to the target
REFUSED = 503  # nginx answers the hold's 503 + Retry-After
HEAD_LIMIT = 64 * 1024  # nginx sends the client's headers; more than this is refused
HEAD_TIMEOUT_S = 5.0
DEFAULT_MAX_S = 10.0
DEFAULT_LIMIT = 1024  # requests held at once; more are refused at once


class HoldRoomError(FieldsError):
    """The room's socket could not be made; `msg` says which path and why."""


def _answer(status, target=None):
    reason = "Released" if status == RELEASED else "Not Held"
    lines = [f"HTTP/1.1 {status} {reason}"]
    if target:
        lines.append(f"{TARGET_HEADER}: {target}")
    lines += ["Content-Length: 0", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("ascii")


def _read_head(sock):
    """The request's head (lower-cased bytes) or None when it is not one within the limits."""
    data = b""
    sock.settimeout(HEAD_TIMEOUT_S)
    while b"\r\n\r\n" not in data:
        if len(data) > HEAD_LIMIT:
            return None
        try:
            chunk = sock.recv(8192)
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return data.split(b"\r\n\r\n", 1)[0].lower()


def _is_check(head):
    return any(line.split(b":", 1)[0].strip() == CHECK_HEADER
               for line in head.split(b"\r\n")[1:])


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False


class HoldRoom:
    """A Unix socket at `path` where held requests wait until `release()`, `close()` or
    `max_s` after `open()`. `user`: nginx's workers' user, whose group may connect (mode
    0660); None: 0600 (root's workers only). `limit`: requests held at once."""

    def __init__(self, path, max_s=DEFAULT_MAX_S, user=None, limit=DEFAULT_LIMIT,
                 clock=time.monotonic):
        self.path = path
        self.max_s = float(max_s)
        self.user = user
        self.limit = int(limit)
        self.clock = clock
        self.cond = threading.Condition()
        self.opened_at = None
        self.done = False  # released or closed: no request waits any more
        self.target = None  # "127.0.0.1:<port>" once released to a model
        self.waiting = 0
        self.holders = {}  # nginx worker pid -> requests of it waiting here (SO_PEERCRED)
        self.pending = {}  # each waiting request -> when it arrived, until counted
        self.waits = []  # seconds each released request waited
        self.refused = 0  # requests answered 503 (past the bound, no target, closed, full)
        self.server = None
        self.thread = None

    # -- the switch's side ---------------------------------------------------------
    def open(self):
        """Listen at `path` (a stale socket from a process that died is replaced)."""
        folder = os.path.dirname(self.path)
        try:
            if folder:
                os.makedirs(folder, mode=0o755, exist_ok=True)
            try:
                mode = os.lstat(self.path).st_mode
            except FileNotFoundError:
                mode = None
            if mode is not None and not (stat.S_ISSOCK(mode) or stat.S_ISLNK(mode)):
                raise HoldRoomError(f"the front door's waiting room {self.path} exists and "
                                    "is not a socket: not replaced")
            if mode is not None:  # a socket left by a process that died (or a link): gone
                os.unlink(self.path)
            self.server = _Server(self.path, self._handler_class())
            gid = pwd.getpwnam(self.user).pw_gid if self.user else None
            if gid is not None:
                os.chown(self.path, -1, gid)
            os.chmod(self.path, 0o660 if gid is not None else 0o600)
        except KeyError:
            self.close()
            raise HoldRoomError(f"the front door's waiting room {self.path}: no user "
                                f"{self.user!r} (nginx's) on this host") from None
        except OSError as exc:
            self.close()
            raise HoldRoomError(f"cannot open the front door's waiting room {self.path}: "
                                f"{exc.strerror or exc}") from None
        self.opened_at = self.clock()
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def release(self, target):
        """The switch ended: held requests (and any still on their way here) go to `target`
        ("127.0.0.1:<port>"), or are refused when it is None (nothing serves)."""
        with self.cond:
            self.target = target
            self.done = True
            if target:  # counted now: stats() right after says so (the threads answer later)
                now = self.clock()
                self.waits.extend(now - arrived for arrived in self.pending.values())
                self.pending.clear()
            self.cond.notify_all()

    def close(self):
        """No request waits any more (those waiting are refused unless released) and the
        socket goes: nginx answers the hold's 503 itself from now on."""
        with self.cond:
            self.done = True
            self.cond.notify_all()
        if self.server is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            if self.thread is not None:  # shutdown() waits for a serve_forever that runs
                self.server.shutdown()
                self.thread = None
            self.server.server_close()
            self.server = None

    def holding_pids(self):
        """The nginx workers whose requests wait here now (their pids, from each
        connection's SO_PEERCRED): the drain does not wait for them."""
        with self.cond:
            return {pid for pid, count in self.holders.items() if count > 0}

    def stats(self):
        """What the room did: held (released to a model), refused, and how long the released
        ones waited (p50, p99, max in seconds)."""
        with self.cond:
            waits = sorted(self.waits)
            out = {"held": len(waits), "refused": self.refused, "max_s": self.max_s}
        if waits:
            out.update(wait_p50_s=round(statistics.median(waits), 3),
                       wait_p99_s=round(waits[int(0.99 * (len(waits) - 1))], 3),
                       wait_max_s=round(waits[-1], 3))
        return out

    # -- a held request ---------------------------------------------------------------
    def _handler_class(self):
        room = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                room.hold(self.request)

        return Handler

    def hold(self, sock):
        head = _read_head(sock)
        if head is None:
            return
        if _is_check(head):
            with contextlib.suppress(OSError):
                sock.sendall(_answer(REFUSED))
            return
        arrived = self.clock()
        pid = _peer_pid(sock)
        with self.cond:
            if self.waiting >= self.limit:
                self.refused += 1
                target = None
            else:
                self.waiting += 1
                self.holders[pid] = self.holders.get(pid, 0) + 1
                key = object()
                self.pending[key] = arrived
                try:
                    deadline = self.opened_at + self.max_s
                    while not self.done and self.clock() < deadline:
                        self.cond.wait(max(0.0, deadline - self.clock()))
                finally:
                    self.waiting -= 1
                    self.holders[pid] -= 1
                target = self.target if self.done else None
                if key in self.pending:  # not counted by release(): after it, or refused
                    del self.pending[key]
                    if target:
                        self.waits.append(self.clock() - arrived)
                    else:
                        self.refused += 1
        with contextlib.suppress(OSError):
            sock.sendall(_answer(RELEASED, target) if target else _answer(REFUSED))


def _peer_pid(sock):
    """The connecting process's pid (SO_PEERCRED: pid, uid, gid), None when not known."""
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return None
    return struct.unpack("3i", creds)[0]
