# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The hf_download module entry point: arguments, fail_json, exit_json (no traceback)."""

import json
import sys

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import hf_download as mu
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
        seen.update(check=self.check_mode, workers=self.max_workers, backoff=self.retry.backoff)
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


def test_every_documented_option_reaches_the_downloader_or_is_module_only():
    import inspect

    import yaml

    options = set(yaml.safe_load(module.DOCUMENTATION)["options"])
    listed = [*mu.MODULE_OPTIONS, *mu.MODULE_RENAMED, *mu.MODULE_ONLY]
    assert sorted(listed) == sorted(options)  # each option once, none left out
    takes = set(inspect.signature(mu.HfDownloader).parameters)
    assert {*mu.MODULE_OPTIONS, *mu.MODULE_RENAMED.values()} <= takes


def test_from_module_passes_each_value_on(monkeypatch, tmp_path):
    seen = {}

    def fake_run(self):
        seen.update(vars(self))
        seen.update(backoff=self.retry.backoff, backoff_max=self.retry.backoff_max)
        return {"changed": False}

    monkeypatch.setattr(mu.HfDownloader, "run", fake_run)
    args = {
        "repo_id": "o/x", "revision": "v1", "local_dir": str(tmp_path / "m"),
        "allow_patterns": ["*.json"], "ignore_patterns": ["*.bin"], "endpoint": "http://h:1",
        "token": "hf_tok_value", "hf_home": str(tmp_path / "hf"), "reverify": True,
        "max_workers": 3, "retries": 2, "retry_backoff": 0.5, "rate_limit_wait_max": 7.0,
        "progress_file": str(tmp_path / "p"), "progress_interval": 1.5, "margin_bytes": 9,
        "hub_venv": str(tmp_path / "v"), "size_hint_bytes": 11, "snapshots": True,
        "shared_volume": True, "lease_s": 5.0, "lease_wait_s": 6.0, "lease_stall_s": 8.0,
        "keep_revisions": ["b" * 40],
    }
    assert run_module(module.main, args).exit_code == 0
    for name in mu.MODULE_OPTIONS:
        assert seen[name] == args[name], name
    for name, to in mu.MODULE_RENAMED.items():
        assert seen[to] == args[name], name
    assert (seen["token"], seen["backoff_max"], seen["check_mode"]) == ("hf_tok_value", 60.0, False)
