# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The hf_download module entry point: arguments, fail_json, exit_json (no traceback)."""

import json
import sys

from ansible_collections.vllm_fleet.fleet.plugins.module_utils import hf_download as mu
from ansible_collections.vllm_fleet.fleet.plugins.modules import hf_download as module

from unit.module_harness import run_module


def test_download_error_becomes_fail_json_and_token_is_not_echoed(monkeypatch, tmp_path):
    def boom(self):
        raise mu.DownloadError("repository org/x not found at http://h (HTTP 404)")

    monkeypatch.setattr(mu.HfDownloader, "run", boom)
    out = run_module(
        module.main,
        {"repo_id": "org/x", "local_dir": str(tmp_path), "token": "hf_secret_value"},
    )
    assert out.exit_code == 1
    assert out["failed"] is True
    assert out["msg"] == "repository org/x not found at http://h (HTTP 404)"
    assert "hf_secret_value" not in json.dumps(out)


def test_token_and_token_file_are_exclusive(tmp_path):
    out = run_module(
        module.main,
        {"repo_id": "o/x", "local_dir": str(tmp_path), "token": "hf_tok_value", "token_file": "/t"},
    )
    assert out.exit_code == 1
    assert "mutually exclusive" in out["msg"]


def test_result_is_passed_through_and_diff_dropped_without_diff_mode(monkeypatch, tmp_path):
    seen = {}

    def fake_run(self):
        seen.update(check=self.check_mode, workers=self.max_workers, backoff=self.backoff)
        return {"changed": True, "revision": "a" * 40, "bytes_to_download": 7, "diff": {}}

    monkeypatch.setattr(mu.HfDownloader, "run", fake_run)
    out = run_module(
        module.main,
        {
            "repo_id": "o/x",
            "local_dir": str(tmp_path),
            "_ansible_check_mode": True,
            "max_workers": 3,
        },
    )
    assert out.exit_code == 0
    assert out["changed"] is True
    assert out["bytes_to_download"] == 7
    assert "diff" not in out
    assert seen == {"check": True, "workers": 3, "backoff": 2.0}


def test_check_mode_without_huggingface_hub_estimates_from_the_size_hint(
        monkeypatch, tmp_path):
    """A host before its first download: no huggingface_hub, the catalog's size less the disk."""
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    model = tmp_path / "org" / "x"
    (model / "sub").mkdir(parents=True)
    (model / "sub" / "model-00001.safetensors").write_bytes(b"x" * 1000)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    out = run_module(module.main, {"repo_id": "org/x", "local_dir": str(model),
                                   "size_hint_bytes": 2**60, "margin_bytes": 0,
                                   "hub_venv": str(tmp_path / "tools"),
                                   "_ansible_check_mode": True})
    assert out.exit_code == 0
    assert out["estimated"] is True
    assert out["revision"] is None
    assert out["bytes_on_disk"] == 1000
    assert out["bytes_to_download"] == 2**60 - 1000
    assert out["disk"]["ok"] is False
    assert out["disk"]["need_bytes"] == 2**60 - 1000
    assert "not enough disk space" in out["disk"]["msg"]
    assert "huggingface_hub is not importable" in out["estimate_reason"]
    # check mode wrote nothing: no lock folder, no manifest, no progress file
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_without_huggingface_hub_a_real_run_fails_clearly(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    out = run_module(module.main, {"repo_id": "org/x", "local_dir": str(tmp_path / "m"),
                                   "size_hint_bytes": 10})
    assert out.exit_code == 1
    assert out["msg"].startswith("huggingface_hub is not importable by ")
    assert not (tmp_path / "m").exists()


def test_rate_limit_wait_max_is_passed_on_and_a_negative_one_refused(monkeypatch, tmp_path):
    seen = {}

    def fake_run(self):
        seen["max"] = self.rate_limit_wait_max
        return {"changed": False}

    monkeypatch.setattr(mu.HfDownloader, "run", fake_run)
    args = {"repo_id": "o/x", "local_dir": str(tmp_path)}
    assert run_module(module.main, args).exit_code == 0
    assert seen == {"max": 600.0}
    assert run_module(module.main, {**args, "rate_limit_wait_max": 90}).exit_code == 0
    assert seen == {"max": 90.0}
    seen.clear()
    out = run_module(module.main, {**args, "rate_limit_wait_max": -1})
    assert out.exit_code == 1
    assert out["msg"] == "rate_limit_wait_max must be 0 or more seconds, got -1.0"
    assert seen == {}
