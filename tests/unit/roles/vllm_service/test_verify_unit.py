# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""verify-unit: the unit's directives must be the ones the template meant to write.

The hostile units here are what a value that got past the template's checks
would produce (the first one is what the role rendered before issue 13 for
extra_args ["--disable-log-stats\\n", "ExecStartPre=/bin/touch", "/tmp/x"]).
"""

import os
import shutil
import subprocess

import pytest
from repo_paths import FIXTURES
from systemd_unit import VERIFY_UNIT, render_unit, tiny_gqa_entry, verify_unit

GOLDEN = (FIXTURES / "vllm_service" / "vllm-tiny_gqa.service").read_text()
NAME = "vllm-tiny_gqa.service"


def with_line(old, new, unit=GOLDEN):
    assert unit.count(old) == 1, old
    return unit.replace(old, new)


EXEC = next(line for line in GOLDEN.splitlines() if line.startswith("ExecStart="))


def line_of(prefix):
    """The golden unit's line number (from 1) of the one line that starts with prefix.

    Problems name lines; reading the numbers from the golden unit keeps these
    cases true when the catalog entry gains or loses a line above them.
    """
    numbers = [n for n, line in enumerate(GOLDEN.splitlines(), 1) if line.startswith(prefix)]
    assert len(numbers) == 1, (prefix, numbers)
    return numbers[0]


def test_the_rendered_unit_is_accepted():
    assert verify_unit.compare(GOLDEN) == []


@pytest.mark.parametrize(("unit", "problems"), [
    # The input as the old template wrote it: a real ExecStartPre= line.
    (with_line(EXEC, EXEC + " --disable-log-stats\nExecStartPre=/bin/touch /tmp/x"),
     [(f"directive Service.ExecStartPre (line {line_of('ExecStart=') + 1}) is not one the"
      " template wrote (1 more than intended)")]),
    # systemd ends a line at CR and at NUL too.
    (with_line("Type=exec", "Type=exec\rUser=root"),
     ["directive Service.User (line 15, 16) is not one the template wrote (1 more than intended)"]),
    (with_line("Type=exec", "Type=exec\x00ExecStartPre=/bin/touch /tmp/x"),
     [("directive Service.ExecStartPre (line 15) is not one the template wrote"
      " (1 more than intended)")]),
    # A trailing backslash swallows the next line into the value.
    (with_line("Environment=HF_HUB_OFFLINE=1", "Environment=HF_HUB_OFFLINE=1\\"),
     ["directive Service.Environment the template wrote is missing (1 fewer than intended)"]),
    (with_line("SystemCallArchitectures=native", "SystemCallArchitectures=native \\"),
     ["directive Service.SystemCallFilter the template wrote is missing (1 fewer than intended)"]),
    # ... so swallowing one line and adding one keeps the count, not the names.
    (with_line("LockPersonality=yes", "LockPersonality=yes\\",
               with_line("UMask=0077", "UMask=0077\nNoNewPrivileges=no")),
     [(f"directive Service.NoNewPrivileges (line {line_of('NoNewPrivileges=')},"
       f" {line_of('UMask=') + 1}) is not one the template wrote (1 more than intended)"),
      ("directive Service.SystemCallArchitectures the template wrote is missing"
      " (1 fewer than intended)")]),
    (with_line("ProtectHome=yes\nPrivateTmp=yes", "PrivateTmp=yes\nProtectHome=yes"),
     ["the directives are not in the order the template wrote them: wanted"]),
    (with_line("# vllm-fleet-directives:", "# directives:"),
     [("wanted exactly one '# vllm-fleet-directives:' line naming the directives the template"
      " wrote, found 0")]),
    (with_line("Type=exec", "Type=exec\n# vllm-fleet-directives: Service.Type"),
     [("wanted exactly one '# vllm-fleet-directives:' line naming the directives the template"
      " wrote, found 2")]),
    (with_line("[Service]", "[Service"), ["line 13: a broken section header '[Service'"]),
    (with_line("KillMode=mixed", "KillMode mixed"),
     [f"line {line_of('KillMode=')}: no 'Key=value' in 'KillMode mixed'"]),
])
def test_units_that_differ_from_their_header_are_refused(unit, problems):
    found = verify_unit.compare(unit)
    assert len(found) == len(problems), found
    for got, wanted in zip(found, problems, strict=True):
        assert got.startswith(wanted), found


def test_comment_lines_are_read_as_systemd_reads_them():
    # A comment never continues, and is dropped even inside a continuation.
    unit = "[Service]\n# note \\\nType=exec\nEnvironment=A=1 \\\n# skipped\n B=2\n"
    directives, problems = verify_unit.parse_unit(unit)
    assert problems == []
    assert directives == [(3, "Service.Type", "exec"), (4, "Service.Environment", "A=1   B=2")]


def test_an_escaped_backslash_does_not_continue_the_line():
    directives, _unused = verify_unit.parse_unit("[Service]\nExecStart=/bin/echo \\\\\nType=exec\n")
    assert [name for _unused, name, _unused2 in directives] == ["Service.ExecStart", "Service.Type"]


def test_a_continuation_at_the_end_of_the_file_is_still_a_line():
    directives, _unused = verify_unit.parse_unit("[Service]\nType=exec\\")
    assert directives == [(2, "Service.Type", "exec")]


# --- the program itself ------------------------------------------------------

def run(unit, tmp_path, path=None):
    (tmp_path / "candidate").write_bytes(unit.encode("utf-8", "surrogateescape"))
    env = {**os.environ, "PATH": path or os.environ["PATH"]}
    return subprocess.run([str(VERIFY_UNIT), str(tmp_path / "candidate"), NAME],
                          capture_output=True, text=True, check=False, env=env)


def fake_systemd_analyze(tmp_path, script):
    folder = tmp_path / "bin"
    folder.mkdir()
    program = folder / "systemd-analyze"
    program.write_text(f"#!/bin/sh\n{script}\n")
    program.chmod(0o755)
    return f"{folder}:/usr/bin:/bin"


def test_program_refuses_an_injected_directive_before_systemd_analyze(tmp_path):
    path = fake_systemd_analyze(tmp_path, "exit 0")
    result = run(with_line(EXEC, EXEC + " --disable-log-stats\nExecStartPre=/bin/touch /tmp/x"),
                 tmp_path, path)
    assert result.returncode == 1
    assert result.stderr == (f"{NAME}: directive Service.ExecStartPre"
                             f" (line {line_of('ExecStart=') + 1}) is not one the"
                             " template wrote (1 more than intended)\n")


@pytest.mark.parametrize(("script", "code", "stderr"), [
    ("exit 0", 0, ""),
    # verify only warns (exit 0) on unknown keys: any line about the unit fails.
    (f"echo '/tmp/x/{NAME}:9: Unknown key name' >&2", 1, f"/tmp/x/{NAME}:9: Unknown key name\n"),
    ("echo 'other.service: not ours' >&2", 0, ""),
    ("echo 'Command /x is not executable' >&2; exit 1", 1, "Command /x is not executable\n"),
])
def test_program_still_fails_on_any_systemd_analyze_complaint(tmp_path, script, code, stderr):
    result = run(GOLDEN, tmp_path, fake_systemd_analyze(tmp_path, script))
    assert (result.returncode, result.stderr) == (code, stderr)


def test_program_usage_and_non_utf8(tmp_path):
    result = subprocess.run([str(VERIFY_UNIT), "x"], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: verify-unit <file> <unit name ending in .service>")
    result = run("[Unit]\nDescription=\udcff\n", tmp_path, fake_systemd_analyze(tmp_path, "exit 0"))
    assert result.returncode == 1
    assert result.stderr.startswith(f"{NAME}: not UTF-8 text")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_program_with_the_real_systemd_analyze(tmp_path):
    # ExecStart's program must exist for `systemd-analyze verify`.
    unit = render_unit(tiny_gqa_entry(), vllm_service_vllm_bin=shutil.which("true"))
    assert run(unit, tmp_path).returncode == 0
    injected = with_line("ProtectHome=yes", "ProtectHome=yes\nExecStartPre=/bin/touch /tmp/x",
                         unit)
    assert run(injected, tmp_path).returncode == 1
    # A bad value under a header that lists it: systemd-analyze's warning fails it.
    bad = with_line("UMask=0077", "UMask=0999", unit)
    result = run(bad, tmp_path)
    assert result.returncode == 1
    assert result.stderr.endswith(": Failed to parse mode value, ignoring: 0999\n")
