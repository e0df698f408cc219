# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""HAProxy's server state across a reload (issue 46, case 2).

A reload starts new workers from the configuration: without a state file every server
comes back as the file says, so a server drained or put in maintenance through the runtime
API (the roll's drain) is UP again and takes requests until its checks take it down
(haproxy/haproxy#2085, #918). HAProxy's answer (configuration.txt, `server-state-file`;
management.txt, `show servers state`): the configuration names a state file
(`server-state-file` in global, `load-server-state-from-file global` in defaults), and
before each reload the runtime API's `show servers state` is written to it; the new
workers read it at start and keep each server's administrative state, weight and
health. The file is written durably (durable.write_atomic), so a crash leaves the old
file or the new one, never half of one.
"""

import socket

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.durable import write_atomic
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.errors import FieldsError

# The first line of `show servers state`'s answer: its format version (HAProxy 1.6 to 3.x).
STATE_VERSION = "1"


class StateError(FieldsError):
    """The runtime API did not answer with a state dump; `fields` holds what it said."""


def runtime_command(socket_path, line, timeout=5.0):
    """One command on HAProxy's runtime API (stats socket): its whole answer as text."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(socket_path)
        conn.sendall(line.encode() + b"\n")
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def read_state(socket_path, command=runtime_command):
    """`show servers state`'s answer, checked: its first line is the format version."""
    try:
        text = command(socket_path, "show servers state")
    except OSError as exc:
        raise StateError(
            f"cannot ask HAProxy's runtime API at {socket_path} for "
            f"'show servers state': {exc.strerror or exc}"
        ) from None
    if text.split("\n", 1)[0].strip() != STATE_VERSION:
        raise StateError(
            f"HAProxy's runtime API at {socket_path} answered 'show servers state' "
            f"with {text[:200]!r}, not a state dump of version {STATE_VERSION}",
            stdout=text,
        )
    return text if text.endswith("\n") else text + "\n"


def servers(text):
    """{(backend, server): admin state} of a state dump (srv_admin_state: 0 ready, bit 1
    forced maintenance, bit 4 forced drain; management.txt)."""
    rows = {}
    header = None
    for line in text.splitlines():
        if line.startswith("#"):
            header = line.lstrip("# ").split()
            continue
        words = line.split()
        if header and len(words) >= len(header) - 1 and "be_name" in header:
            row = dict(zip(header, words, strict=False))
            rows[(row["be_name"], row["srv_name"])] = int(row.get("srv_admin_state", 0))
    return rows


def save(socket_path, state_file, check_mode=False, command=runtime_command):
    """Write HAProxy's server state to `state_file` before a reload. Returns the result:
    changed (the file's text differs: the dump carries each server's seconds since its last
    change, so a save a second later changes it), servers (backend/server -> admin state)."""
    text = read_state(socket_path, command)
    try:
        with open(state_file, encoding="utf-8") as handle:
            before = handle.read()
    except FileNotFoundError:
        before = None
    changed = before != text
    if changed and not check_mode:
        try:
            write_atomic(state_file, text, mode=0o600, prefix=".server-state.")
        except OSError as exc:
            raise StateError(
                f"cannot write HAProxy's server state file {state_file}: {exc.strerror or exc}"
            ) from None
    return {
        "changed": changed,
        "state_file": state_file,
        "servers": {f"{be}/{srv}": state for (be, srv), state in servers(text).items()},
        "diff": {"before": before or "", "after": text},
    }
