# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The front door's waiting room (issue 44, case 6), on real Unix sockets: what nginx's
@vllm_hold gets back for a held request, and what the room counts."""

import os
import socket
import threading
import time

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.hold_room import (
    HoldRoom,
    HoldRoomError,
)

HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"


class Held(threading.Thread):
    """nginx's side of one held request: sends the head, reads the whole answer."""

    def __init__(self, path, head=HEAD):
        super().__init__(daemon=True)
        self.path = path
        self.head = head
        self.answer = b""
        self.start()

    def run(self):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(20)
            sock.connect(self.path)
            sock.sendall(self.head)
            while chunk := sock.recv(4096):
                self.answer += chunk

    def status(self):
        self.join(20)
        assert not self.is_alive()
        return int(self.answer.split()[1])

    def target(self):
        for line in self.answer.split(b"\r\n"):
            if line.lower().startswith(b"x-vllm-fleet-upstream:"):
                return line.split(b":", 1)[1].strip().decode()
        return None


def _until(room, count):
    deadline = time.monotonic() + 10
    while room.waiting < count:
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "run" / "hold.sock")


def test_held_requests_wait_until_released_then_learn_the_model_that_serves(path):
    room = HoldRoom(path, max_s=10).open()
    try:
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        held = [Held(path), Held(path), Held(path)]
        _until(room, 3)
        time.sleep(0.2)
        assert all(h.is_alive() for h in held)  # nothing answered before the release
        room.release("127.0.0.1:8002")
        assert [h.status() for h in held] == [409, 409, 409]
        assert {h.target() for h in held} == {"127.0.0.1:8002"}
        # after the release a late one is sent on at once
        late = Held(path)
        assert late.status() == 409
        stats = room.stats()
        assert stats["held"] == 4
        assert stats["refused"] == 0
        assert 0.2 <= stats["wait_max_s"] < 5
        assert stats["wait_p50_s"] >= 0.2
    finally:
        room.close()
    assert not os.path.exists(path)


def test_the_hold_check_is_answered_at_once_and_not_counted(path):
    room = HoldRoom(path, max_s=10).open()
    try:
        check = Held(path, HEAD.replace(b"\r\n\r\n", b"\r\nX-Vllm-Fleet-Hold: check\r\n\r\n"))
        assert check.status() == 503
        assert room.stats() == {"held": 0, "refused": 0, "max_s": 10.0}
    finally:
        room.close()


def test_past_the_bound_held_and_new_requests_are_refused(path):
    room = HoldRoom(path, max_s=0.5).open()
    try:
        start = time.monotonic()
        first = Held(path)
        assert first.status() == 503
        assert 0.3 <= time.monotonic() - start < 5
        assert first.target() is None
        assert Held(path).status() == 503
        room.release("127.0.0.1:8002")  # too late for them
        assert room.stats()["refused"] == 2
        assert room.stats()["held"] == 0
    finally:
        room.close()


def test_a_switch_that_ends_with_nothing_serving_or_closes_refuses_whoever_waits(path):
    room = HoldRoom(path, max_s=10).open()
    waiting = Held(path)
    _until(room, 1)
    room.release(None)
    assert waiting.status() == 503
    room.close()
    room2 = HoldRoom(path, max_s=10).open()
    waiting2 = Held(path)
    _until(room2, 1)
    room2.close()  # a switch that fell back to cold, or the module's end
    assert waiting2.status() == 503
    assert room2.stats()["refused"] == 1


def test_a_full_room_refuses_at_once(path):
    room = HoldRoom(path, max_s=10, limit=2).open()
    try:
        held = [Held(path), Held(path)]
        _until(room, 2)
        assert Held(path).status() == 503
        room.release("127.0.0.1:8001")
        assert [h.status() for h in held] == [409, 409]
    finally:
        room.close()


def test_a_stale_socket_is_replaced_and_a_planted_file_refused(path, tmp_path):
    stale = HoldRoom(path).open()
    stale.server.server_close()  # its process died: the socket file stays, nobody listens
    room = HoldRoom(path, max_s=10).open()
    try:
        room.release("127.0.0.1:8001")
        assert Held(path).status() == 409
    finally:
        room.close()
    planted = tmp_path / "planted.sock"
    planted.write_text("not a socket")
    with pytest.raises(HoldRoomError, match="exists and is not a socket"):
        HoldRoom(str(planted)).open()
    assert planted.read_text() == "not a socket"


def test_an_unknown_nginx_user_is_named(path):
    with pytest.raises(HoldRoomError, match="no user 'no-such-nginx-user'"):
        HoldRoom(path, user="no-such-nginx-user").open()
    assert not os.path.exists(path)


def test_nginx_users_group_may_connect(path):
    room = HoldRoom(path, user="root").open()
    try:
        st = os.stat(path)
        assert oct(st.st_mode & 0o777) == "0o660"
        assert st.st_gid == 0
    finally:
        room.close()
