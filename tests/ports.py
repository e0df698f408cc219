# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""A free loopback TCP port for a server a test starts (nginx, HAProxy, a stand-in backend).

The port is free when it is handed out and the server binds it a moment later. Asking the
kernel for port 0 would hand out one from the ephemeral range, which every outgoing
connection on the machine (the test's own clients, nginx's and HAProxy's upstream
connections, pytest's other worker) also draws its source port from: in that moment one
could take it. This picks at random from below the ephemeral range instead, where the
kernel gives out nothing by itself, and checks the port can be bound.
"""

import random
import socket
from pathlib import Path

_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_low():
    """The lowest port of the kernel's ephemeral range (32768 where it cannot be read)."""
    try:
        return int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(rng=random):
    """A loopback port below the ephemeral range that nothing listens on now."""
    high = ephemeral_low() - 1
    low = max(1024, high - 12000)
    for _attempt in range(200):
        port = rng.randint(low, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {low}-{high} after 200 tries")
