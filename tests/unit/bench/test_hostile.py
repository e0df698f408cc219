# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/hostile.py: every hostile-input class through the real checks, nothing unexpected."""

import importlib.util
import subprocess
import sys

from repo_paths import ROOT

BENCH = ROOT / "bench" / "hostile.py"
spec = importlib.util.spec_from_file_location("bench_hostile", BENCH)
hostile = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hostile)


def test_the_bench_passes_its_check_with_a_row_per_class():
    proc = subprocess.run([sys.executable, str(BENCH), "--check"], capture_output=True,
                          text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[2:-2]]
    assert len(rows) == 18
    for row in rows:
        tried, refused, intact, passed, wrongly = (int(cell) for cell in row[-5:])
        assert (passed, wrongly) == (0, 0), row
        assert tried == (refused if row[-6] == "refuse" else intact) > 0, row
    assert proc.stdout.splitlines()[-1].endswith(" values: OK")
    # the committed output (make bench-hostile) is what the bench prints now: a product-owned
    # option or unit added since is counted there too
    assert proc.stdout == (ROOT / "bench" / "output" / "hostile.txt").read_text()


def test_a_check_that_lets_owned_values_through_fails_the_bench(monkeypatch, capsys):
    # The bench is only as good as its verdict: with the request check gone, it must say so.
    monkeypatch.setattr(hostile, "check_request", lambda *_args, **_kwargs: None)
    assert hostile.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "owned options in extra_args                        refuse   342       0" in out
    assert out.rstrip().endswith("MISSED")


def test_a_check_that_refuses_case_variants_fails_the_bench(monkeypatch, capsys):
    monkeypatch.setattr(hostile, "api_key_problems",
                        lambda keys, _var: ["dup"] if len({k.lower() for k in keys}) < len(keys)
                        or any(k.startswith("REPLACE") or len(k) < 16 or " " in k or "\n" in k
                               for k in keys) else [])
    assert hostile.main(["--check"]) == 1
    assert "API keys differing only in case                    keep       3       3" in (
        capsys.readouterr().out)
