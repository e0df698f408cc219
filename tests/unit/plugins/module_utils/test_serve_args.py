# Copyright 2026 vllm-fleet contributors
"""serve_args: catalog `serve` options -> vllm argv -> systemd ExecStart= value."""

import pytest
import yaml
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.serve_args import (
    option_flag,
    serve_options_argv,
    systemd_exec_line,
    systemd_quote,
    vllm_serve_argv,
)
from repo_paths import CATALOG


def test_option_flag_turns_underscores_into_dashes():
    assert option_flag("tensor_parallel_size") == "--tensor-parallel-size"
    assert option_flag("enforce-eager") == "--enforce-eager"


@pytest.mark.parametrize("bad", ["", "--port", "-x", 3, None])
def test_option_flag_rejects_non_words(bad):
    with pytest.raises(ValueError, match="bare words"):
        option_flag(bad)


def test_true_is_a_bare_flag_false_and_none_are_omitted():
    argv = serve_options_argv({"trust_remote_code": True, "enforce_eager": False,
                               "quantization": None, "max_model_len": 4096})
    assert argv == ["--trust-remote-code", "--max-model-len", "4096"]


def test_dict_becomes_one_compact_json_word_with_sorted_keys():
    argv = serve_options_argv({"speculative_config": {"num_speculative_tokens": 2,
                                                      "method": "mtp"}})
    assert argv == ["--speculative-config", '{"method":"mtp","num_speculative_tokens":2}']


def test_list_repeats_values_after_one_flag_and_empty_list_is_omitted():
    argv = serve_options_argv({"allowed_origins": ["a", "b", 3], "middleware": [],
                               "api_key": ("k1",)})
    assert argv == ["--allowed-origins", "a", "b", "3", "--api-key", "k1"]


def test_floats_keep_their_exact_repr_and_order_is_the_dicts():
    argv = serve_options_argv({"gpu_memory_utilization": 0.92, "max_num_seqs": 0,
                               "rope_factor": 1e-05})
    assert argv == ["--gpu-memory-utilization", "0.92", "--max-num-seqs", "0",
                    "--rope-factor", "1e-05"]


def test_no_options_is_no_words():
    assert serve_options_argv(None) == []
    assert serve_options_argv({}) == []


def test_full_argv_puts_host_port_name_first_then_options_then_extra_args():
    argv = vllm_serve_argv("/opt/vllm/bin/vllm", "/srv/models/x", "tiny", 8001,
                           {"dtype": "float32"}, extra_args=["--seed", 7])
    assert argv == ["/opt/vllm/bin/vllm", "serve", "/srv/models/x", "--host", "127.0.0.1",
                    "--port", "8001", "--served-model-name", "tiny", "--dtype", "float32",
                    "--seed", "7"]


@pytest.mark.parametrize("key", ["host", "port", "served_model_name", "model"])
def test_reserved_keys_are_refused(key):
    with pytest.raises(ValueError, match=f"must not set {key}: the catalog entry's port"):
        vllm_serve_argv("vllm", "/m", "tiny", 8001, {key: "x"})


def test_all_reserved_keys_are_named_sorted():
    with pytest.raises(ValueError, match="must not set host, port: "):
        vllm_serve_argv("vllm", "/m", "tiny", 8001, {"port": 1, "host": "10.0.0.1"})


@pytest.mark.parametrize("port", [0, -1, 65536, "8001", 80.0, None])
def test_bad_port_is_refused(port):
    with pytest.raises(ValueError, match=f"port must be an integer 1-65535, got {port!r}"):
        vllm_serve_argv("vllm", "/m", "tiny", port)


def test_edge_ports_are_accepted():
    assert vllm_serve_argv("v", "/m", "t", 1)[6] == "1"
    assert vllm_serve_argv("v", "/m", "t", 65535)[6] == "65535"


@pytest.mark.parametrize(("word", "quoted"), [
    ("/opt/vllm/bin/vllm", "/opt/vllm/bin/vllm"),
    ("minimax_m2_append_think", "minimax_m2_append_think"),
    ("50%", "50%%"),
    ("$HOME", '"$$HOME"'),
    ("a b", '"a b"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("C:\\dir", '"C:\\\\dir"'),
    ("", '""'),
    ('{"a":1}', '"{\\"a\\":1}"'),
    ("50% of $X", '"50%% of $$X"'),
    (8001, "8001"),
])
def test_systemd_quote(word, quoted):
    assert systemd_quote(word) == quoted


def test_exec_line_joins_quoted_words():
    line = systemd_exec_line(["/usr/bin/echo", "a b", "50%", "--cfg", '{"k":"v w"}'])
    assert line == '/usr/bin/echo "a b" 50%% --cfg "{\\"k\\":\\"v w\\"}"'


def test_exec_line_needs_a_program():
    with pytest.raises(ValueError, match="needs at least the program"):
        systemd_exec_line([])


def test_golden_exec_start_for_the_catalogs_minimax_m25():
    models = yaml.safe_load(CATALOG.read_text())
    entry = models["vllm_fleet_catalog"]["minimax_m25"]
    serve = dict(entry["serve"])
    # The two templated values, resolved by hand for the default layout tp8_ep.
    assert models["vllm_fleet_minimax_m25_layout"] == "tp8_ep"
    assert "vllm_fleet_minimax_m25_layouts" in serve["tensor_parallel_size"]
    assert "vllm_fleet_minimax_m25_layouts" in serve["enable_expert_parallel"]
    serve["tensor_parallel_size"] = 8
    serve["enable_expert_parallel"] = True
    argv = vllm_serve_argv("/opt/vllm/0.33.0-cuda/bin/vllm", "/srv/models/MiniMaxAI/MiniMax-M2.5",
                           entry["served_model_name"], entry["port"], serve,
                           extra_args=entry["extra_args"])
    assert systemd_exec_line(argv) == (
        "/opt/vllm/0.33.0-cuda/bin/vllm serve /srv/models/MiniMaxAI/MiniMax-M2.5"
        " --host 127.0.0.1 --port 8101 --served-model-name minimax-m2.5"
        " --tensor-parallel-size 8 --enable-expert-parallel --max-model-len 196608"
        " --gpu-memory-utilization 0.92 --kv-cache-dtype auto --trust-remote-code"
        " --enable-auto-tool-choice --tool-call-parser minimax_m2"
        " --reasoning-parser minimax_m2_append_think --shutdown-timeout 60"
    )
