"""The hf_download module entry point: arguments, fail_json, exit_json (no traceback)."""

import json

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.vllm_fleet.fleet.plugins.module_utils import hf_download as mu
from ansible_collections.vllm_fleet.fleet.plugins.modules import disk_space as disk_space_module
from ansible_collections.vllm_fleet.fleet.plugins.modules import hf_download as module


def _run(mod, args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        mod.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_download_error_becomes_fail_json_and_token_is_not_echoed(monkeypatch, capsys, tmp_path):
    def boom(self):
        raise mu.DownloadError("repository org/x not found at http://h (HTTP 404)")

    monkeypatch.setattr(mu.HfDownloader, "run", boom)
    rc, out = _run(
        module,
        {"repo_id": "org/x", "local_dir": str(tmp_path), "token": "hf_secret_value"},
        capsys,
    )
    assert rc == 1
    assert out["failed"] is True
    assert out["msg"] == "repository org/x not found at http://h (HTTP 404)"
    assert "hf_secret_value" not in json.dumps(out)


def test_token_and_token_file_are_exclusive(capsys, tmp_path):
    rc, out = _run(
        module,
        {"repo_id": "o/x", "local_dir": str(tmp_path), "token": "hf_tok_value", "token_file": "/t"},
        capsys,
    )
    assert rc == 1
    assert "mutually exclusive" in out["msg"]


def test_result_is_passed_through_and_diff_dropped_without_diff_mode(monkeypatch, capsys, tmp_path):
    seen = {}

    def fake_run(self):
        seen.update(check=self.check_mode, workers=self.max_workers, backoff=self.backoff)
        return {"changed": True, "revision": "a" * 40, "bytes_to_download": 7, "diff": {}}

    monkeypatch.setattr(mu.HfDownloader, "run", fake_run)
    rc, out = _run(
        module,
        {
            "repo_id": "o/x",
            "local_dir": str(tmp_path),
            "_ansible_check_mode": True,
            "max_workers": 3,
        },
        capsys,
    )
    assert rc == 0
    assert out["changed"] is True
    assert out["bytes_to_download"] == 7
    assert "diff" not in out
    assert seen == {"check": True, "workers": 3, "backoff": 2.0}


def test_disk_space_module_fails_with_need_free_path(capsys, tmp_path):
    rc, out = _run(disk_space_module, {"path": str(tmp_path / "new"), "need_bytes": 2**60}, capsys)
    assert rc == 1
    assert out["msg"].startswith(
        f"not enough disk space on {tmp_path} for {tmp_path / 'new'}: "
        "need 1152921504606846976 bytes"
    )
    assert out["path"] == str(tmp_path / "new")
    assert out["filesystem_path"] == str(tmp_path)
    assert out["fits"] is False
    rc, out = _run(disk_space_module, {"path": str(tmp_path), "need_bytes": 1}, capsys)
    assert rc == 0
    assert out["changed"] is False
    assert out["free_bytes"] > 0
