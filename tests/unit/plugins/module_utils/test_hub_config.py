# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""hub_config.fetch_model_configs: what the preflight sizes a model from when no copy of its
config.json ships (issue 33, item 3). `download` stands in for huggingface_hub 2.4's
hf_hub_download: the error classes below carry the names and bases of its own
(huggingface_hub/errors.py: RemoteEntryNotFoundError(HfHubHTTPError, EntryNotFoundError),
LocalEntryNotFoundError(FileNotFoundError, EntryNotFoundError), GatedRepoError)."""

import json

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit.hub_config import (
    fetch_model_configs,
)


class EntryNotFoundError(Exception):
    pass


class RemoteEntryNotFoundError(EntryNotFoundError):
    pass


class LocalEntryNotFoundError(FileNotFoundError, EntryNotFoundError):
    pass


class GatedRepoError(OSError):
    pass


def hub(tmp_path, files, calls=None):
    """A download over {filename: text or an exception to raise}."""
    def download(repo_id, filename, *, revision, endpoint, token):
        if calls is not None:
            calls.append((repo_id, filename, revision, endpoint, token))
        answer = files.get(filename, RemoteEntryNotFoundError(f"404 {filename}"))
        if isinstance(answer, Exception):
            raise answer
        path = tmp_path / filename
        path.write_text(answer)
        return str(path)
    return download


CONFIG = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 64}


def test_config_alone_and_no_quant_config(tmp_path):
    calls = []
    got = fetch_model_configs("site/m", "abc", hub(tmp_path, {"config.json": json.dumps(CONFIG)},
                                                   calls), endpoint="http://hub", token="hf_x")  # noqa: S106 - a stand-in
    assert got == {"repo_id": "site/m", "revision": "abc", "config": CONFIG,
                   "hf_quant_config": None, "error": None, "source": "http://hub, site/m at abc"}
    assert calls == [("site/m", "config.json", "abc", "http://hub", "hf_x"),
                     ("site/m", "hf_quant_config.json", "abc", "http://hub", "hf_x")]
    assert "hf_x" not in json.dumps(got)


def test_empty_endpoint_and_token_are_none(tmp_path):
    calls = []
    fetch_model_configs("site/m", "main", hub(tmp_path, {"config.json": "{}"}, calls),
                        endpoint="", token="")
    assert calls[0][3:] == (None, None)


def test_the_quant_config_where_the_repo_has_one(tmp_path):
    files = {"config.json": json.dumps(CONFIG),
             "hf_quant_config.json": json.dumps({"quantization": {"quant_algo": "NVFP4"}})}
    got = fetch_model_configs("nvidia/m", "main", hub(tmp_path, files))
    assert got["hf_quant_config"] == {"quantization": {"quant_algo": "NVFP4"}}
    assert got["error"] is None


@pytest.mark.parametrize(("files", "error"), [
    ({"config.json": GatedRepoError("401 Client Error. Access to model site/m is restricted.")},
     ("config.json of site/m at revision main could not be read from the Hugging Face Hub: "
     "GatedRepoError: 401 Client Error. Access to model site/m is restricted")),
    ({"config.json": RemoteEntryNotFoundError("404 Client Error.\n\nEntry Not Found")},
     ("config.json of site/m at revision main could not be read from the Hugging Face Hub: "
     "RemoteEntryNotFoundError: 404 Client Error. Entry Not Found")),
    ({"config.json": "[1, 2]"},
     ("config.json of site/m at revision main could not be read from the Hugging Face Hub: "
     "TypeError: config.json holds a JSON list, not an object")),
    ({"config.json": "{not json"},
     ("config.json of site/m at revision main could not be read from the Hugging Face Hub: "
      "JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 "
      "(char 1)")),
    # Offline and not in the cache says nothing about the repo: not "no quant config".
    ({"config.json": json.dumps(CONFIG),
      "hf_quant_config.json": LocalEntryNotFoundError("offline, not in the cache")},
     ("hf_quant_config.json of site/m at revision main could not be read from the Hugging Face "
     "Hub: LocalEntryNotFoundError: offline, not in the cache")),
])
def test_what_cannot_be_read_is_an_error_never_a_raise(tmp_path, files, error):
    got = fetch_model_configs("site/m", "main", hub(tmp_path, files))
    assert got["error"] == error
    assert got["config"] is None
