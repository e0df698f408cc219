# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The startup gate's journal follower and stall check, on the fake host and its fake clock.

A unit that stops printing for `startup_stall_s` fails its gate at that moment (stage
`stall`), a new line resets the silence, and `startup_timeout_s` stays the outer bound.
Switch-level tests (rollback after a stall) are in test_cutover.py.
"""

import json
import pathlib

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch.units import (
    JournalFollower,
    StartProgress,
    Systemd,
    UnitGate,
    journal_text,
    line_shape,
    stall_check,
)

from unit.fake_host import HANG, HEALTHY, FakeHost

U = "vllm-green.service"
URL = "http://127.0.0.1:18001"
LOADING = [(0.0, "INFO api_server.py: vLLM API server version 0.32.0"),
           (2.0, "INFO model.py: Resolved architecture: LlamaForCausalLM"),
           (5.0, "INFO loader.py: Loading weights took 0.05 seconds")]


def svc(stall_s, timeout_s=60):
    return {"model": "green", "unit": U, "url": URL, "served_model_name": "green-model",
            "startup_timeout_s": timeout_s, "startup_stall_s": stall_s}


def gate(host, interval=1.0, progress=None, run_command=None):
    return UnitGate(Systemd(run_command or host.run_command), host.request, host.clock,
                    host.sleep, interval=interval, progress=progress)


def start(host, stall_s, timeout_s=60, **kwargs):
    return gate(host, **kwargs).start(svc(stall_s, timeout_s), wall=host.wall)


@pytest.mark.parametrize("interval", [1.0, 2.0, 3.0, 7.0])
def test_a_silent_start_fails_within_stall_s_plus_one_probe_interval(interval):
    """The last line is printed 5 s after the start; the gate gives up at 5 + 20 s, or at
    the first probe after it (never before, never a whole interval later)."""
    host = FakeHost()
    host.unit(U, URL, "green-model", behaviour=HANG, prints=LOADING)
    outcome = start(host, stall_s=20, interval=interval)
    assert outcome["ok"] is False
    assert outcome["stage"] == "stall"
    assert 25.0 <= outcome["seconds"] < 25.0 + interval
    assert outcome["detail"].startswith(f"{U} printed nothing for ")
    assert "wanted a new journal line at least every 20 s (startup_stall_s)" in outcome["detail"]
    assert outcome["detail"].endswith(" | ".join(line for _t, line in LOADING))


def test_the_stall_is_detected_at_exactly_stall_s():
    host = FakeHost()
    host.unit(U, URL, "green-model", behaviour=HANG, prints=LOADING)
    outcome = start(host, stall_s=20, interval=1.0)
    assert (outcome["stage"], outcome["seconds"]) == ("stall", 25.0)
    assert "printed nothing for 20.0 s" in outcome["detail"]


def test_each_new_line_resets_the_silence():
    """A line every 15 s for 100 s with stall_s 20: the slow start passes its gate."""
    host = FakeHost()
    host.unit(U, URL, "green-model", behaviour=HEALTHY, warmup_s=100.0,
              prints=[(float(t), f"INFO loading shard {t // 15}") for t in range(0, 100, 15)])
    outcome = start(host, stall_s=20, timeout_s=300)
    assert (outcome["ok"], outcome["seconds"]) == (True, 100.0)


def test_one_gap_longer_than_stall_s_fails_the_same_start():
    """The same start with the 45 s line missing: silent from 30 s, it fails at 50 s."""
    host = FakeHost()
    lines = [(float(t), f"INFO loading shard {t // 15}") for t in range(0, 100, 15) if t != 45]
    host.unit(U, URL, "green-model", behaviour=HEALTHY, warmup_s=100.0, prints=lines)
    outcome = start(host, stall_s=20, timeout_s=300)
    assert (outcome["ok"], outcome["stage"], outcome["seconds"]) == (False, "stall", 50.0)


def test_the_startup_timeout_still_bounds_a_start_that_keeps_printing():
    host = FakeHost()
    host.unit(U, URL, "green-model", behaviour=HANG,
              prints=[(float(t), f"waiting for NCCL ({t} s)") for t in range(0, 200, 5)])
    outcome = start(host, stall_s=20, timeout_s=60)
    assert (outcome["ok"], outcome["stage"], outcome["seconds"]) == (False, "health", 60.0)
    assert outcome["detail"].startswith("not healthy after 60 s")


@pytest.mark.parametrize("stall_s", [0, None])
def test_stall_s_0_or_unset_turns_the_check_off(stall_s):
    host = FakeHost()
    host.unit(U, URL, "green-model", behaviour=HANG, prints=LOADING)
    outcome = start(host, stall_s=stall_s, timeout_s=60)
    assert (outcome["stage"], outcome["seconds"]) == ("health", 60.0)


def test_an_unreadable_journal_is_not_a_stall():
    """journalctl failing says nothing about the server: only the timeout ends the start."""
    host = FakeHost()
    host.unit(U, URL, "green-model", behaviour=HANG, prints=LOADING)

    def run(argv):
        if argv[0] == "journalctl":
            return 1, "", "Failed to get journal access: Permission denied"
        return host.run_command(argv)

    outcome = start(host, stall_s=20, timeout_s=60, run_command=run)
    assert (outcome["stage"], outcome["seconds"]) == ("health", 60.0)


def test_a_dead_process_is_reported_before_a_stall():
    host = FakeHost()
    host.unit(U, URL, "green-model", behaviour=HANG, prints=LOADING)
    host.units[U].behaviour = "crash"
    outcome = start(host, stall_s=20)
    assert (outcome["stage"], outcome["seconds"]) == ("process", 0.0)


def test_one_journal_read_per_probe_serves_the_stall_check_and_the_progress(tmp_path):
    """Progress and stall read the same follower: one `journalctl -o json` per probe, the
    first from the start's time, the rest after the last cursor; no other journal read."""
    host = FakeHost()
    host.unit(U, URL, "green-model", behaviour=HANG, prints=LOADING)
    progress_file = tmp_path / "progress.json"
    progress = StartProgress(str(progress_file), interval=0.0, wall=host.wall)
    outcome = start(host, stall_s=20, interval=1.0, progress=progress)
    reads = [argv for argv in host.calls if argv[0] == "journalctl"]
    assert len(reads) == outcome["attempts"] == 26
    assert reads[0][-2:] == ["--since", "@1799999999"]
    assert all(argv[-2] == "--after-cursor" for argv in reads[1:])
    written = json.loads(progress_file.read_text())
    assert written["last_line"] == LOADING[-1][1]
    assert written["silent_s"] == 20.0


def test_the_follower_keeps_the_last_lines_and_dates_a_line_by_its_own_stamp():
    host = FakeHost()
    host.unit(U, URL, "green-model", behaviour=HANG,
              prints=[(float(t), f"line {t}") for t in range(50)])
    host.units[U].started_at = 0.0
    follower = JournalFollower(Systemd(host.run_command), U, 0, host.clock, keep=3)
    host.now = 10.5
    assert follower.poll() == 11
    assert list(follower.lines) == ["line 8", "line 9", "line 10"]
    assert follower.silent_s() == 0.5  # line 10 was printed at 10.0, read at 10.5
    host.now = 12.0
    assert follower.poll() == 2
    assert (follower.count, follower.last_line, follower.silent_s()) == (13, "line 12", 0.0)


def test_a_stamp_from_another_clock_is_clamped_between_two_reads():
    """An entry new since the last read was printed after it: a stamp far in the past (or
    the future) cannot make a silence longer (or shorter) than one read interval."""
    class Journal:
        def __init__(self):
            self.batches = [[("old", None)], [("new", 5.0)], [("late", 900.0)]]

        def journal_entries(self, _unit, _since, cursor=None):
            return self.batches.pop(0), cursor, True

    now = [100.0]
    follower = JournalFollower(Journal(), U, 0, lambda: now[0])
    follower.poll()
    now[0] = 130.0
    follower.poll()
    assert follower.silent_s() == 30.0  # the stamp 5.0 is clamped to the previous read, 100
    now[0] = 140.0
    follower.poll()
    assert follower.silent_s() == 0.0   # the stamp 900.0 is clamped to now


def test_stall_check_names_what_was_wanted_and_what_was_found():
    class Quiet:
        readable = True
        lines = ("a", "b", "c", "d")

        @staticmethod
        def silent_s():
            return 31.25

    up, why = stall_check(Quiet(), 30, U)
    assert up is False
    assert why == (f"{U} printed nothing for 31.2 s while starting, wanted a new journal line "
                   "at least every 30 s (startup_stall_s); its last lines: b | c | d")
    assert stall_check(Quiet(), 40, U) == (True, "")


@pytest.mark.parametrize(("message", "text"), [
    ("plain", "plain"),
    (None, ""),
    ([98, 97, 114, 32, 49, 13, 98, 97, 114, 32, 50, 13], "bar 2"),
    ("Loading shards:  50%\rLoading shards: 100%\n", "Loading shards: 100%"),
    ([0xE2, 0x96, 0x88, 0xFF], "\u2588\ufffd"),
])
def test_journal_text_shows_what_a_terminal_showed_last(message, text):
    assert journal_text(message) == text


# -- progress is a new line, not any line (tests/fixtures/vllm_logs/SOURCE.md) ----------------

LOGS = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "vllm_logs"
SHM_DP2 = (LOGS / "vllm-issue-44185-shm-broadcast-dp2.log").read_text().splitlines()
SHM = (LOGS / "vllm-ascend-issue-3717-shm-broadcast.log").read_text().splitlines()
SHARDS = (LOGS / "vllm-pr-38476-shard-load-30s.log").read_text().splitlines()


def test_a_hung_start_repeating_vllms_shm_broadcast_line_is_one_line_each():
    assert len({line_shape(line) for line in SHM}) == 1
    assert len({line_shape(line) for line in SHM_DP2}) == 2  # one per data-parallel engine


def test_each_shard_of_a_slow_load_is_a_new_line():
    loading = [line for line in SHARDS if "checkpoint shards" in line]
    assert len({line_shape(line) for line in loading}) == len(loading) == 8
    assert line_shape(loading[0]) == ("Loading safetensors checkpoint shards:  26% Completed | "
                                      "22/85 [~<~, ~]")


@pytest.mark.parametrize(("line", "shape"), [
    ('(APIServer pid=81599) INFO:     127.0.0.1:56038 - "GET /health HTTP/1.1" 200 OK',
     '(APIServer ~) INFO:     ~ - "GET /health HTTP/1.1" 200 OK'),
    ("[rank0]:[W1209 11:24:53.753104426 compiler_depend.ts:117] Warning: Driver Version:",
     "[rank0]:[~ compiler_depend.ts:117] Warning: Driver Version:"),
    ("2026-12-04T23:17:12.123+00:00 started", "~ started"),
])
def test_line_shape_masks_stamps_pids_and_client_ports(line, shape):
    assert line_shape(line) == shape


def timed(lines, every):
    return [(float(index * every), line) for index, line in enumerate(lines)]


@pytest.mark.parametrize("log", [SHM, SHM_DP2], ids=["one-engine", "two-engines"])
def test_a_start_that_only_repeats_a_line_stalls_at_stall_s_plus_one_interval(log):
    """vllm-ascend#3717 / vllm#44185: a hung start prints the shm_broadcast line every 60 s
    and nothing else. Before, each line reset the silence and the start ran its whole
    startup_timeout_s (here 600 s); now it fails at startup_stall_s (90 s) after its last
    new line, at the next probe (interval 5 s)."""
    host = FakeHost()
    repeated = (log * 10)[:10]
    # the loading lines by 5 s, then the repeated line every 60 s from 60 s on
    host.unit(U, URL, "green-model", behaviour=HANG,
              prints=LOADING + [(60.0 * (i + 1), line) for i, line in enumerate(repeated)])
    outcome = start(host, stall_s=90, timeout_s=600, interval=5.0)
    last_new = 60.0 * len(set(map(line_shape, log)))  # the last line not seen before
    assert outcome["stage"] == "stall"
    assert last_new + 90.0 <= outcome["seconds"] < last_new + 95.0
    assert " printed nothing new for " in outcome["detail"]
    assert "lines it repeated)" in outcome["detail"]


def test_a_slow_load_printing_a_shard_every_30_s_is_not_a_stall():
    """vllm#38476's load: a shard every ~30 s with a bare "(Worker_TP0 pid=1700) " line
    between. With startup_stall_s 45 it is never stalled; masking every digit (the same
    shape for each shard) would have stopped it at 45 s."""
    host = FakeHost()
    host.unit(U, URL, "green-model", behaviour=HANG, prints=timed(SHARDS, 15.0))
    outcome = start(host, stall_s=45, timeout_s=200, interval=5.0)
    # the last shard line is printed at 15 * 14 = 210 s > the 200 s timeout: no stall before
    assert outcome["stage"] == "health"
    assert outcome["seconds"] >= 200.0
