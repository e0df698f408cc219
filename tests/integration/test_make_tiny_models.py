# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""lab/make_tiny_models.py's extra revisions of tiny-gqa, served by lab/hub_server.py.

A stand-in main tree (no torch: the revisions are file work only) with the files the
script makes; the real huggingface_hub client reads the revisions back.
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

hf = pytest.importorskip("huggingface_hub")
import hub_server  # noqa: E402  (tests/integration/conftest.py puts lab/ on sys.path)
import make_tiny_models as mtm  # noqa: E402
from huggingface_hub import HfApi, hf_hub_download  # noqa: E402
from huggingface_hub.errors import RevisionNotFoundError  # noqa: E402

SCRIPT = Path(__file__).resolve().parent.parent.parent / "lab" / "make_tiny_models.py"
REPO = "vllm-fleet-lab/tiny-gqa"
MAIN = {
    "config.json": json.dumps({"architectures": ["LlamaForCausalLM"]}),
    "generation_config.json": json.dumps({"max_new_tokens": 32}),
    "lab.json": json.dumps({"repo_id": REPO, "seed": 1234}, indent=2) + "\n",
    "tokenizer.json": json.dumps({"model": {"vocab": {f"t{i}": i for i in range(500)}}}),
    "tokenizer_config.json": json.dumps({"eos_token": "<|im_end|>"}),
    "chat_template.jinja": "{{ messages }}",
}


@pytest.fixture
def root(tmp_path):
    repo = tmp_path / "hub" / REPO
    repo.mkdir(parents=True)
    for rel, text in MAIN.items():
        (repo / rel).write_text(text)
    data = random.Random(7).randbytes(2 * 1024 * 1024 + 3)  # noqa: S311
    (repo / "model.safetensors").write_bytes(data)
    return tmp_path / "hub"


def _files(top: Path) -> dict:
    return {f.relative_to(top).as_posix(): f.read_bytes() for f in top.rglob("*") if f.is_file()}


def test_revisions_are_main_with_one_change_each(root):
    repo = root / REPO
    assert mtm.write_revisions(repo) == ["update-good", "update-broken"]
    main = {k: v for k, v in _files(repo).items() if not k.startswith(".revisions/")}
    good = _files(repo / ".revisions/update-good")
    broken = _files(repo / ".revisions/update-broken")
    assert set(good) == set(main) | {"README.md"}
    assert "revision update-good" in good["README.md"].decode()
    lab = {"repo_id": REPO, "seed": 1234, "revision": "update-good"}
    assert json.loads(good["lab.json"]) == lab
    assert {k: v for k, v in good.items() if k not in {"README.md", "lab.json"}} == {
        k: v for k, v in main.items() if k != "lab.json"
    }
    assert set(broken) == set(main)
    assert {k: v for k, v in broken.items() if k != "tokenizer.json"} == {
        k: v for k, v in main.items() if k != "tokenizer.json"
    }
    assert main["tokenizer.json"].startswith(broken["tokenizer.json"])
    assert len(broken["tokenizer.json"]) < len(main["tokenizer.json"])
    with pytest.raises(ValueError):  # noqa: PT011 - json.JSONDecodeError
        json.loads(broken["tokenizer.json"])
    json.loads(broken["config.json"])  # what the preflight reads still parses
    # the weights are hard links to main's, the small files copies
    for label in ("update-good", "update-broken"):
        tree = repo / ".revisions" / label
        assert os.path.samefile(tree / "model.safetensors", repo / "model.safetensors")
        assert not os.path.samefile(tree / "config.json", repo / "config.json")


def test_a_rerun_keeps_the_trees_and_a_changed_main_rebuilds_them(root):
    repo = root / REPO
    mtm.write_revisions(repo)
    before = {f: f.stat().st_ino for f in (repo / ".revisions").rglob("*")}
    (repo / ".revisions/.update-good.tmp").mkdir()  # a run that stopped half-way
    assert mtm.write_revisions(repo) == []
    assert {f: f.stat().st_ino for f in (repo / ".revisions").rglob("*")} == before
    (repo / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    assert mtm.write_revisions(repo) == ["update-good", "update-broken"]
    good = repo / ".revisions/update-good/tokenizer.json"
    assert good.read_bytes() == (repo / "tokenizer.json").read_bytes()
    broken = (repo / ".revisions/update-broken/tokenizer.json").read_bytes()
    assert (repo / "tokenizer.json").read_bytes().startswith(broken)
    (repo / ".revisions/update-broken/README.md").write_text("stray\n")
    assert mtm.write_revisions(repo) == ["update-broken"]
    assert not (repo / ".revisions/update-broken/README.md").exists()


def test_the_hub_serves_each_revision_by_label_and_sha(root, tmp_path):
    repo = root / REPO
    mtm.write_revisions(repo)
    server, url = hub_server.start_in_thread(root)
    try:
        api = HfApi(endpoint=url)
        main = api.model_info(REPO)
        good = api.model_info(REPO, revision="update-good")
        broken = api.model_info(REPO, revision="update-broken")
        assert len({main.sha, good.sha, broken.sha}) == 3
        assert {s.rfilename for s in main.siblings} == set(MAIN) | {"model.safetensors"}
        assert {s.rfilename for s in good.siblings} == set(MAIN) | {
            "model.safetensors",
            "README.md",
        }
        assert api.model_info(REPO, revision=broken.sha).sha == broken.sha
        path = hf_hub_download(
            REPO, "tokenizer.json", revision="update-broken", endpoint=url, cache_dir=tmp_path
        )
        assert (
            Path(path).read_bytes()
            == (repo / ".revisions/update-broken/tokenizer.json").read_bytes()
        )
        with pytest.raises(RevisionNotFoundError):
            api.model_info(REPO, revision="update-other")
    finally:
        server.shutdown()
        server.server_close()


def test_the_script_adds_revisions_to_a_root_made_before_them(root):
    (root / "vllm-fleet-lab/tiny-mla").mkdir(parents=True)
    (root / "vllm-fleet-lab/tiny-mla/config.json").write_text("{}")
    run = [sys.executable, str(SCRIPT), "--out", str(root)]
    first = subprocess.run(run, capture_output=True, text=True, check=True, timeout=60)
    # stdout is what callers read (lab/hub.sh's own output): unchanged, the models present
    assert first.stdout.splitlines() == [
        f"lab: {REPO} present in {root / REPO}",
        f"lab: vllm-fleet-lab/tiny-mla present in {root / 'vllm-fleet-lab/tiny-mla'}",
    ]
    assert "wrote revision update-good" in first.stderr
    assert "wrote revision update-broken" in first.stderr
    assert (root / REPO / ".revisions/update-good/README.md").is_file()
    again = subprocess.run(run, capture_output=True, text=True, check=True, timeout=60)
    assert again.stdout == first.stdout
    assert again.stderr == ""
