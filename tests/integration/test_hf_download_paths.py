# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 45 case 3: a path the Hub lists never leads outside the model folder.

The listing's paths were joined to the model folder as given, and the files written
as root: a mirror, a proxy or a hostile Hub listing ``../x`` or ``/abs/x`` (with
its own sha256, so the hash check agrees) wrote there. The lab Hub's `tree_alias`
fault lists such a path with a real file's size and hashes; the download and the
check-mode plan refuse the revision, naming the path, before a byte is fetched.
"""

import pytest

pytest.importorskip("huggingface_hub")

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.hf_download import (
    DownloadError,
    unsafe_repo_path,
)

SMALL = "org/small"


@pytest.mark.parametrize(("listed", "why"), [
    ("../escape.json", "a '..' segment"),
    ("extra/../../escape.json", "a '..' segment"),
    ("ABSOLUTE", "an absolute path"),
    ("extra//notes2.txt", "a '' segment"),
    ("./config2.json", "a '.' segment"),
    ("extra\\..\\..\\escape.json", "a backslash"),
])
@pytest.mark.parametrize("check_mode", [False, True])
def test_a_listing_that_names_a_path_outside_the_folder_is_refused_before_a_byte(
        hub, download, tmp_path, listed, why, check_mode):
    escape = tmp_path / "escape.json"
    listed = str(escape) if listed == "ABSOLUTE" else listed
    local = tmp_path / "models" / "m"
    hub.faults(tree_alias={listed: "config.json"})
    with pytest.raises(DownloadError) as caught:
        download(SMALL, local, check_mode=check_mode)
    assert f"names {listed!r}, {why}" in str(caught.value)
    assert "the revision is refused, nothing was written" in str(caught.value)
    assert hub.stats()["bytes_sent"] == {}  # not one byte of any file fetched
    assert not escape.exists()
    assert not (tmp_path / "models" / "escape.json").exists()
    assert not [p for p in local.rglob("*") if p.is_file() and ".cache" not in p.parts]


def test_the_same_listing_without_the_alias_downloads(hub, download, tmp_path):
    """The fault is what the refusal is about: the repo itself downloads."""
    result = download(SMALL, tmp_path / "m", allow_patterns=["config.json"])
    assert (tmp_path / "m" / "config.json").is_file()
    assert len(result["revision"]) == 40


@pytest.mark.parametrize("path", [
    "config.json", "original/consolidated.pth", "a.b/c..d/e...json", "..hidden", "x/.y"])
def test_ordinary_repo_paths_pass(path):
    assert unsafe_repo_path(path) is None


@pytest.mark.parametrize(("path", "why"), [
    ("", "an empty path"), (None, "an empty path"), ("a\x00b", "a NUL byte"),
    ("/etc/passwd", "an absolute path"), ("a/", "a '' segment"), ("..", "a '..' segment")])
def test_hostile_repo_paths_are_named(path, why):
    assert unsafe_repo_path(path) == why
