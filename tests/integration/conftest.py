# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the integration tests: lab/hub_server.py on loopback serving small repos.

The server is a purpose-built test fixture (see its header); the repos hold random bytes
generated once per session from a fixed seed, so every figure is reproducible.
"""

import json
import random
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "lab"))

import hub_server  # noqa: E402

MiB = 1024 * 1024

# Extra revisions, written as complete trees under <repo>/.revisions/<label>/ (see the
# server's "Revisions:"): {repo_id: {label: {path: bytes length or text}}}. org/revs's main
# tree is sharded; its v2 is one file (a re-upload that changed the layout). A later test
# of the downloader depends on this exact shape.
REVISIONS = {
    "org/revs": {
        "v2": {
            "model.safetensors": 3 * MiB + 7,
            "config.json": json.dumps({"architectures": ["LlamaForCausalLM"], "revision": "v2"}),
        },
        # A dot name is no label: a tree being built, renamed into place when complete.
        ".v3.tmp": {"config.json": json.dumps({"revision": "v3"})},
    },
    "org/gated": {"v2": {"config.json": json.dumps({"gated": True, "revision": "v2"})}},
}


def _random_bytes(rng: random.Random, n: int) -> bytes:
    return rng.randbytes(n)


def _write_tree(top: Path, files: dict, rng: random.Random) -> dict:
    """Write {path: bytes length (random bytes) or text} under top; return {path: size}."""
    sizes = {}
    for rel, content in files.items():
        path = top / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _random_bytes(rng, content) if isinstance(content, int) else content.encode()
        path.write_bytes(data)
        sizes[rel] = len(data)
    return sizes


def build_repos(root: Path) -> dict:
    """Write the test repos under root; return {repo_id: {path: bytes length}} of main trees.

    The extra revisions in REVISIONS are written too (their sizes: Hub.revision_sizes).
    """
    rng = random.Random(4)  # noqa: S311 - reproducible test data, not crypto
    layout = {
        "org/small": {
            "config.json": json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}),
            "tokenizer.json": json.dumps({"vocab": {f"t{i}": i for i in range(4000)}}),
            "README.md": "# small\n",
            "model-00001-of-00002.safetensors": 12 * MiB,
            "model-00002-of-00002.safetensors": 10 * MiB + 123,
            "extra/notes.txt": "notes\n",
            "original/consolidated.pth": 2 * MiB,
        },
        "org/big": {
            "config.json": json.dumps({"architectures": ["LlamaForCausalLM"]}),
            "model.safetensors": 48 * MiB,
        },
        "org/gated": {
            "config.json": json.dumps({"gated": True}),
            "model.safetensors": 1 * MiB,
        },
        "org/revs": {
            "model-00001-of-00002.safetensors": 1 * MiB + 5,
            "model-00002-of-00002.safetensors": 512 * 1024,
            "model.safetensors.index.json": json.dumps(
                {
                    "metadata": {"total_size": 1 * MiB + 5 + 512 * 1024},
                    "weight_map": {
                        "a.weight": "model-00001-of-00002.safetensors",
                        "b.weight": "model-00002-of-00002.safetensors",
                    },
                }
            ),
            "config.json": json.dumps({"architectures": ["LlamaForCausalLM"], "revision": "main"}),
        },
    }
    sizes = {}
    for repo_id, files in layout.items():
        sizes[repo_id] = _write_tree(root / repo_id, files, rng)
    for repo_id, trees in REVISIONS.items():
        for label, files in trees.items():
            _write_tree(root / repo_id / ".revisions" / label, files, rng)
    (root / "org/small/.tags").write_text("v1.0\n")
    (root / "org/gated/.gated").write_text("")
    return sizes


class Hub:
    """Handle on the running server: base url, repo root, faults and stats."""

    def __init__(self, server, url: str, root: Path, sizes: dict) -> None:
        self.server = server
        self.url = url
        self.root = root
        self.sizes = sizes
        # {repo_id: {label: {path: bytes length}}} of the trees under <repo>/.revisions/
        self.revision_sizes = {
            repo_id: {
                label: {
                    rel: content if isinstance(content, int) else len(content.encode())
                    for rel, content in files.items()
                }
                for label, files in trees.items()
            }
            for repo_id, trees in REVISIONS.items()
        }

    def faults(self, **cfg) -> None:
        self.server.faults.update(cfg)

    def stats(self) -> dict:
        with urllib.request.urlopen(self.url + "/_stats", timeout=5) as r:
            return json.loads(r.read())

    def release(self) -> None:
        """Let the bodies a hold_after fault stopped go on."""
        self.server.faults.release()

    def reset(self) -> None:
        self.server.faults.reset()


@pytest.fixture(scope="session")
def hub_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    sizes = build_repos(root)
    return root, sizes


@pytest.fixture(scope="session")
def _hub_session(hub_root):
    root, sizes = hub_root
    server, url = hub_server.start_in_thread(root)
    yield Hub(server, url, root, sizes)
    server.shutdown()
    server.server_close()


@pytest.fixture
def hub(_hub_session):
    """The session's server with faults and counters cleared before and after each test."""
    _hub_session.reset()
    yield _hub_session
    _hub_session.reset()


@pytest.fixture
def download(hub):
    """Run HfDownloader against the test server with fast backoff; returns the result dict."""
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.hf_download import (
        HfDownloader,
    )

    def _run(repo_id, local_dir, **kw):
        kw.setdefault("endpoint", hub.url)
        kw.setdefault("margin_bytes", 0)
        kw.setdefault("backoff", 0.01)
        kw.setdefault("max_workers", 4)
        return HfDownloader(repo_id=repo_id, local_dir=str(local_dir), **kw).run()

    return _run


@pytest.fixture
def wait_until():
    """Poll check() until it is true; fail naming `what` after `timeout` seconds.

    Only for states that last until the test itself moves on (a transfer the Hub holds,
    a run blocked on the lock): the deadline bounds a hang and never decides a pass.
    """

    def _wait(check, what, timeout=30.0):
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
            time.sleep(0.01)

    return _wait
