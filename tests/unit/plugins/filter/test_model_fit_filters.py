# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The model_fit and catalog_profile filters: Ansible errors, documentation files."""

import json
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter import catalog_profile as cp_filter
from ansible_collections.vllm_fleet.fleet.plugins.filter import model_fit as mf_filter
from repo_paths import FIXTURES, ROOT

FILTERS = {**mf_filter.FilterModule().filters(), **cp_filter.FilterModule().filters()}
GPU = {"count": 8, "memory_total_bytes": 102_641_958_912, "compute_capability": "12.0",
       "interconnect": "pcie"}


def test_each_filter_has_a_documentation_file():
    for name in FILTERS:
        doc = yaml.safe_load((ROOT / "plugins" / "filter" / f"{name}.yml").read_text())
        assert doc["DOCUMENTATION"]["name"] == name
        assert doc["DOCUMENTATION"]["short_description"]
        for option in doc["DOCUMENTATION"]["options"].values():
            assert option.get("type"), f"{name}: every option has a type"
        assert doc["RETURN"]["_value"]["type"]
        assert doc["EXAMPLES"].strip()


def test_model_fit_filter_options_are_documented():
    doc = yaml.safe_load((ROOT / "plugins" / "filter" / "model_fit.yml").read_text())
    documented = set(doc["DOCUMENTATION"]["options"]) - {"_input"}
    import inspect

    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit import model_fit as mf
    accepted = set(inspect.signature(mf.model_fit).parameters) - {"config"}
    assert documented == accepted


def test_model_fit_filter_refusal_is_an_ansible_error():
    config = json.loads(Path(FIXTURES / "models" / "nvidia--DeepSeek-V4-Flash-NVFP4.config.json")
                        .read_text())
    with pytest.raises(AnsibleFilterError, match=r"^model_fit: cannot size this architecture"):
        FILTERS["model_fit"](config, gpu=GPU, weight_bytes=1)


def test_catalog_profile_filter():
    entry = {"serve": {"tensor_parallel_size": 8},
             "profiles": {"sm120": {"serve": {"decode_context_parallel_size": 8}}}}
    chosen = FILTERS["catalog_profile"](entry, "12.0")
    assert chosen["profile"] == "sm120"
    assert chosen["entry"]["serve"] == {"tensor_parallel_size": 8,
                                        "decode_context_parallel_size": 8}
    with pytest.raises(AnsibleFilterError, match=r"^catalog_profile: profile 'sm90' was "
                                                 r"requested"):
        FILTERS["catalog_profile"](entry, "12.0", "sm90")


def test_table_shows_profile_dcp_and_layer_classes():
    kimi = json.loads((FIXTURES / "models" / "moonshotai--Kimi-K2.5.config.json").read_text())
    qwen = json.loads((FIXTURES / "models" / "Qwen--Qwen3-Next-80B-A3B-Thinking.config.json")
                      .read_text())
    fits = {
        "kimi": FILTERS["model_fit"](kimi, serve={"tensor_parallel_size": 8,
                                                  "decode_context_parallel_size": 8,
                                                  "kv_cache_dtype": "fp8",
                                                  "max_model_len": 131072},
                                     gpu=GPU, weight_bytes=595_000_000_000, profile="sm120"),
        "qwen": FILTERS["model_fit"](qwen, serve={"tensor_parallel_size": 4},
                                     gpu=GPU, weight_bytes=160_000_000_000),
    }
    lines = FILTERS["model_fit_table"](fits, ["kimi", "qwen"], "Plan")
    rows = {line.split(" | ")[0].strip(): line for line in lines[3:] if " | " in line}
    assert "sm120" in rows["profile"]
    assert "(none)" in rows["profile"]
    assert "8 (each rank holds 1/8 of every request's tokens)" in rows["decode context parallel"]
    assert "MLA latent 576 x61" in rows["layer classes"]
    assert "full x12, linear x36, 274,432 B state" in rows["layer classes"]
    with pytest.raises(AnsibleFilterError, match="model_fit_table wants model_fit reports"):
        FILTERS["model_fit_table"]({"x": {}})
