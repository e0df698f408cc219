# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""A model's config.json (and hf_quant_config.json) from the Hub, for the fit.

The one place the collection fetches a model's configuration without its
weights: the deploy's preflight and playbooks/plan.yml both size a model whose
config.json does not ship in roles/vllm_model/files/model_configs/ from what
this returns (through the lookup vllm_fleet.fleet.hub_config, on the
controller). `download` is huggingface_hub.hf_hub_download or a stand-in with
its signature, so pytest drives every answer without a network.
"""

import json

# huggingface_hub's error classes, by name (no import here): a file the repo does not
# have is "absent", anything else (no network, a gated repo without a token, a revision
# that does not exist) is an error. LocalEntryNotFoundError (offline, not in the cache)
# is an EntryNotFoundError too, but says nothing about the repo.
_ABSENT = ("RemoteEntryNotFoundError",)
_NOT_ABSENT = ("LocalEntryNotFoundError",)
_WHY_LIMIT = 400


def _names(exc):
    return {cls.__name__ for cls in type(exc).__mro__}


def _absent(exc):
    names = _names(exc)
    if names & set(_NOT_ABSENT):
        return False
    return bool(names & set(_ABSENT)) or "EntryNotFoundError" in names


def why(exc):
    """One line: the error's class and its text (lines joined, shortened, no final dot)."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if len(text) > _WHY_LIMIT:
        text = text[:_WHY_LIMIT] + "..."
    text = text.rstrip(".")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _read_object(path, name):
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, dict):
        raise TypeError(f"{name} holds a JSON {type(data).__name__}, not an object")
    return data


def fetch_model_configs(repo_id, revision, download, endpoint=None, token=None):
    """{repo_id, revision, config, hf_quant_config, source, error} for one model.

    config.json must be there; hf_quant_config.json is read where the repo has one
    (modelopt checkpoints) and None where the Hub answers that it has none. Any other
    failure sets `error` (what was wanted, at which revision, and why) and leaves the
    configs None: the caller decides whether an unsized model may go on. The token is
    passed to `download` only, never returned or put in a message.
    """
    result = {"repo_id": repo_id, "revision": revision, "config": None,
              "hf_quant_config": None, "error": None,
              "source": f"{endpoint or 'the Hugging Face Hub'}, {repo_id} at {revision}"}
    kwargs = {"revision": revision, "endpoint": endpoint or None, "token": token or None}
    try:
        result["config"] = _read_object(download(repo_id, "config.json", **kwargs),
                                        "config.json")
    except Exception as exc:  # noqa: BLE001 - every failure is reported, none raised
        result["error"] = (f"config.json of {repo_id} at revision {revision} could not be "
                           f"read from {endpoint or 'the Hugging Face Hub'}: {why(exc)}")
        return result
    try:
        result["hf_quant_config"] = _read_object(
            download(repo_id, "hf_quant_config.json", **kwargs), "hf_quant_config.json")
    except Exception as exc:  # noqa: BLE001 - as above
        if not _absent(exc):
            result["config"] = None
            result["error"] = (f"hf_quant_config.json of {repo_id} at revision {revision} "
                               f"could not be read from {endpoint or 'the Hugging Face Hub'}: "
                               f"{why(exc)}")
    return result
