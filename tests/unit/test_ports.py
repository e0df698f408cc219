# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""tests/ports.py: test servers' ports come from below the kernel's ephemeral range."""

import random
import socket

import ports


def test_a_free_port_is_below_the_ephemeral_range_and_can_be_bound():
    port = ports.free_port()
    assert 1024 <= port < ports.ephemeral_low()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # raises if it was not free


def test_a_port_something_listens_on_is_passed_over():
    with socket.socket() as held:
        held.bind(("127.0.0.1", ports.free_port()))
        held.listen()
        taken = held.getsockname()[1]

        class FirstTheTakenOne(random.Random):
            def __init__(self):
                super().__init__(1)
                self.first = True

            def randint(self, a, b):
                if self.first:
                    self.first = False
                    return taken
                return super().randint(a, b)

        rng = FirstTheTakenOne()
        port = ports.free_port(rng)
        assert not rng.first
        assert port != taken
