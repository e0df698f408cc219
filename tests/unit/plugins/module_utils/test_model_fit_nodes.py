# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""model_fit for a model one replica of which spans several hosts (the catalog's `nodes`).

Each host needs the layout's GPUs / nodes; the weights and KV cache per GPU
are the layout's own. The head-split checks (attention and KV heads against
tensor parallel) are model_fit's, for multi-node layouts as for one host.
"""

import json

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit import model_fit as mf
from repo_paths import FIXTURES

MODELS = FIXTURES / "models"
NINE_GIB = 9 * 1024**3
H200_X8 = {"count": 8, "memory_total_bytes": 143_771 * 1_048_576, "compute_capability": "9.0",
           "interconnect": "nvlink"}
KIMI_TP16 = {"tensor_parallel_size": 16, "max_model_len": 131072, "gpu_memory_utilization": 0.92}


def config(name):
    return json.loads((MODELS / name).read_text())


def fit(name, serve, gpu=None, **kwargs):
    gpu = H200_X8 if gpu is None else gpu
    kwargs.setdefault("overhead_bytes_per_gpu", NINE_GIB)
    kwargs.setdefault("weight_bytes", 595_000_000_000)
    return mf.model_fit(config(name), serve=serve, gpu=gpu, **kwargs)


def gpu_warnings(report):
    return [w for w in report["warnings"] if "GPUs" in w and "needs" in w]


def test_one_host_is_the_default_and_reported():
    report = fit("moonshotai--Kimi-K2.5.config.json", KIMI_TP16)
    assert report["nodes"] == 1
    assert report["gpus_needed"] == 16
    assert gpu_warnings(report) == [
        ("tensor_parallel_size 16 x pipeline_parallel_size 1 x data_parallel_size 1 needs 16 GPUs,"
         " the host has 8")]
    assert report["verdict"] == "does not fit: needs 16 GPUs, has 8"
    assert report["fits"] is False


def test_tp16_over_two_8_gpu_hosts_needs_8_on_each():
    report = fit("moonshotai--Kimi-K2.5.config.json", KIMI_TP16, nodes=2)
    assert (report["nodes"], report["gpus_needed"], report["gpus_available"]) == (2, 8, 8)
    assert gpu_warnings(report) == []
    # (595,000,000,000 - 2,177,236,992 replicated MLA projections and router) / 16
    # + 2,177,236,992 = 39,228,659,680 bytes of weights per GPU
    assert report["weights_bytes_per_gpu"] == 39_228_659_680
    # MLA: the latent is whole on every one of the 16 ranks
    assert report["kv_replicas"] == 16


def test_too_few_gpus_on_each_host_says_so():
    four = dict(H200_X8, count=4)
    report = fit("moonshotai--Kimi-K2.5.config.json", KIMI_TP16, gpu=four, nodes=2)
    assert gpu_warnings(report) == [
        ("tensor_parallel_size 16 x pipeline_parallel_size 1 x data_parallel_size 1 needs 8 GPUs "
         "on each of 2 hosts, the host has 4")]
    assert report["verdict"] == "does not fit: needs 8 GPUs on each of 2 hosts, has 4"


def test_head_split_checks_apply_across_hosts():
    # MiniMax-M2.5: 48 attention heads, 8 KV heads; TP 32 over 4 hosts of 8.
    report = fit("MiniMaxAI--MiniMax-M2.5.config.json",
                 {"tensor_parallel_size": 32, "max_model_len": 8192}, nodes=4,
                 weight_bytes=230_000_000_000)
    assert report["gpus_needed"] == 8
    assert ("tensor parallel: tensor_parallel_size 32 does not divide num_attention_heads "
            "48") in report["refusals"]


@pytest.mark.parametrize("nodes", [3, 0, "two"])
def test_nodes_must_split_the_gpus_evenly(nodes):
    with pytest.raises(mf.ModelFitError, match="nodes"):
        fit("moonshotai--Kimi-K2.5.config.json", KIMI_TP16, nodes=nodes)
