# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""serve_args: catalog `serve` options -> vllm argv -> systemd ExecStart= value."""

import re

import pytest
import yaml
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.serve_args import (
    CACHE_ENV,
    LOAD_FORMATS,
    PRODUCT_ENV,
    PRODUCT_UNITS,
    UNIT_ENV,
    ProductOwnedError,
    UnitValueError,
    check_model_name,
    check_request,
    check_unit_inputs,
    control_character,
    nvidia_device_nodes,
    option_flag,
    product_option,
    serve_options_argv,
    served_names,
    sleep_settings,
    systemd_environment,
    systemd_exec_line,
    systemd_quote,
    systemd_specifier_text,
    systemd_word,
    unit_text,
    vllm_serve_argv,
)
from repo_paths import CATALOG, ROOT


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
                    "--port", "8001", "--served-model-name", "tiny",
                    "--enable-server-load-tracking", "--dtype", "float32",
                    "--seed", "7"]


def test_an_alias_is_a_second_served_model_name_after_the_models_own():
    argv = vllm_serve_argv("/opt/vllm/bin/vllm", "/srv/models/x", "tiny-gqa", 8001,
                           {"dtype": "float32"}, aliases=["default"])
    assert argv == ["/opt/vllm/bin/vllm", "serve", "/srv/models/x", "--host", "127.0.0.1",
                    "--port", "8001", "--served-model-name", "tiny-gqa", "default",
                    "--enable-server-load-tracking", "--dtype", "float32"]


@pytest.mark.parametrize(("aliases", "names"), [
    (None, ["tiny-gqa"]),
    ([], ["tiny-gqa"]),
    ("", ["tiny-gqa"]),
    ([""], ["tiny-gqa"]),
    ("default", ["tiny-gqa", "default"]),
    (["tiny-gqa"], ["tiny-gqa"]),               # the model's own name adds nothing
    (["pool-a", "default", "pool-a"], ["tiny-gqa", "pool-a", "default"]),
])
def test_served_names_put_the_models_own_first_and_each_alias_once(aliases, names):
    assert served_names("tiny-gqa", aliases) == names


@pytest.mark.parametrize(("alias", "error"), [
    (" default", "catalog entry tiny_gqa: model alias must not start or end with white space"),
    (7, "catalog entry tiny_gqa: model alias must be text, got 7"),
    ("default\nExecStartPre=/bin/touch /tmp/x",
     "catalog entry tiny_gqa: vllm_service_model_alias holds a control character (U+000A"),
])
def test_a_bad_alias_is_refused_naming_the_model(alias, error):
    with pytest.raises(ValueError, match="^" + re.escape(error)):
        vllm_serve_argv("vllm", "/m", "tiny-gqa", 8001, aliases=[alias],
                        context="catalog entry tiny_gqa")


@pytest.mark.parametrize("key", ["host", "port", "served_model_name", "model",
                                 "disable_log_stats", "api_server_count"])
def test_reserved_keys_are_refused(key):
    with pytest.raises(ValueError, match=f"^catalog entry: serve.{key} is vLLM's --"):
        vllm_serve_argv("vllm", "/m", "tiny", 8001, {key: "x"})


def test_each_reserved_key_is_named_in_the_entrys_order():
    with pytest.raises(ProductOwnedError) as caught:
        vllm_serve_argv("vllm", "/m", "tiny", 8001, {"port": 1, "host": "10.0.0.1"})
    assert str(caught.value) == (
        "catalog entry: serve.port is vLLM's --port: the product owns it (the catalog entry's"
        " port field sets it); serve.host is vLLM's --host: the product owns it (the unit binds"
        " vllm_service_host (127.0.0.1) behind the front door)")


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
        " --enable-server-load-tracking"
        " --tensor-parallel-size 8 --enable-expert-parallel --max-model-len 196608"
        " --gpu-memory-utilization 0.92 --kv-cache-dtype auto --trust-remote-code"
        " --enable-auto-tool-choice --tool-call-parser minimax_m2"
        " --reasoning-parser minimax_m2_append_think --shutdown-timeout 60"
    )


# --- values that could change the unit's structure (issue 13) ---------------

def test_a_word_ending_in_a_newline_is_refused_not_judged_plain():
    # Python's `$` matches before a trailing newline: the old check called
    # "--disable-log-stats\n" plain and wrote it unquoted, newline and all.
    wanted = r"control character \(U\+000A, line feed\) at offset 19"
    with pytest.raises(UnitValueError, match=wanted):
        systemd_quote("--disable-log-stats\n")


@pytest.mark.parametrize(("char", "label"), [
    ("\n", "U+000A, line feed"), ("\r", "U+000D, carriage return"), ("\x00", "U+0000, NUL"),
    ("\t", "U+0009, tab"), ("\x1b", "U+001B, escape"), ("\x7f", "U+007F, delete"),
    ("\x85", "U+0085, next line"), ("\x01", "U+0001"),
])
def test_every_control_character_is_named(char, label):
    assert control_character(f"ab{char}c") == f"a control character ({label}) at offset 2"


def test_printable_text_has_no_control_character():
    # Unicode line separators are not line ends for systemd (it reads bytes).
    assert control_character('tiny gqa \u2028 \u00e9 % $ \\ "') is None


def test_unit_text_names_the_field_and_refuses_unencodable_text():
    with pytest.raises(UnitValueError, match=r"^served_model_name holds a control character"):
        unit_text("served_model_name", "tiny\r")
    with pytest.raises(UnitValueError, match="not valid UTF-8"):
        unit_text("served_model_name", "tiny\udc80")
    assert unit_text("port", 8001) == "8001"


def test_hostile_extra_args_are_refused_with_field_and_model():
    # The input: without the check it renders a real ExecStartPre= line.
    with pytest.raises(UnitValueError) as caught:
        vllm_serve_argv("/opt/vllm/bin/vllm", "/m", "tiny-gqa", 8001,
                        extra_args=["--disable-log-stats\n", "ExecStartPre=/bin/touch", "/tmp/x"],
                        context="catalog entry tiny_gqa")
    assert str(caught.value) == (
        "catalog entry tiny_gqa: extra_args[0] holds a control character (U+000A, line feed) at"
        " offset 19: '--disable-log-stats\\n'; a value written into a systemd unit must be one"
        " line of printable text")


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"served_model_name": "tiny\nExecStartPre=/bin/touch /tmp/x"}, "served_model_name"),
    ({"options": {"max_model_len": "512\n"}}, "serve.max_model_len"),
    ({"options": {"allowed_origins": ["a", "b\rc"]}}, "serve.allowed_origins"),
    ({"model_dir": "/srv/models/x\x00"}, "model folder"),
    ({"extra_args": ["--seed", "0", "\x7f"]}, "extra_args[2]"),
])
def test_every_argv_field_is_checked(kwargs, field):
    args = {"vllm_bin": "/v", "model_dir": "/m", "served_model_name": "t", "port": 1, **kwargs}
    with pytest.raises(UnitValueError) as caught:
        vllm_serve_argv(context="catalog entry m1", **args)
    assert str(caught.value).startswith(f"catalog entry m1: {field} holds a control character")


def test_json_options_escape_control_characters_themselves():
    # A dict becomes JSON, which writes a newline as the two characters \n.
    argv = vllm_serve_argv("/v", "/m", "t", 1, {"override_generation_config": {"stop": "a\nb"}})
    assert argv[-1] == '{"stop":"a\\nb"}'


@pytest.mark.parametrize("key", ["--dtype", "bad\nkey", "dtype half", "", "_x"])
def test_serve_option_names_are_bare_words_and_errors_carry_the_context(key):
    with pytest.raises(ValueError, match=r"^catalog entry m1: serve: serve option names are bare"):
        vllm_serve_argv("/v", "/m", "t", 1, {key: "half"}, context="catalog entry m1")


def test_exec_line_needs_an_absolute_program():
    # ExecStart= reads a leading -, @, :, + or ! as a prefix, even inside quotes.
    with pytest.raises(ValueError, match="absolute path, got '@/bin/sh'"):
        systemd_exec_line(["@/bin/sh", "x"])


# --- quoting per directive ---------------------------------------------------

@pytest.mark.parametrize(("name", "value", "line"), [
    ("VLLM_USE_V1", "1", "VLLM_USE_V1=1"),
    ("NCCL_DEBUG_SUBSYS", "INIT ENV", '"NCCL_DEBUG_SUBSYS=INIT ENV"'),
    # systemd.exec(5): in Environment= "$" has no special meaning; only % specifiers.
    ("PATH_HINT", "$PATH:50%", '"PATH_HINT=$PATH:50%%"'),
    ("PRICE", "$5", '"PRICE=$5"'),
    ("Q", 'say "hi" \\o/', '"Q=say \\"hi\\" \\\\o/"'),
    ("EMPTY", "", "EMPTY="),
    ("N", 3, "N=3"),
])
def test_environment_assignment_keeps_dollar_and_doubles_percent(name, value, line):
    assert systemd_environment(name, value) == line


@pytest.mark.parametrize("name", ["", "1ABC", "A B", "A=B", "A\nB", "A-B", "\u00c9T\u00c9"])
def test_environment_names_must_be_names(name):
    with pytest.raises(UnitValueError, match="is not an environment variable name"):
        systemd_environment(name, "x")


def test_environment_value_with_a_newline_is_refused():
    with pytest.raises(UnitValueError, match=r"^env.A holds a control character"):
        systemd_environment("A", "1\nExecStartPre=/bin/touch /tmp/x", field="env.A")


def test_word_for_path_lists_keeps_dollar():
    assert systemd_word("/var/lib/vllm") == "/var/lib/vllm"
    assert systemd_word("/srv/a b/$x%") == '"/srv/a b/$x%%"'


def test_specifier_text_doubles_percent_and_refuses_a_continuation():
    assert systemd_specifier_text("tiny (50% of $X)") == "tiny (50%% of $X)"
    with pytest.raises(UnitValueError, match="ends in a backslash"):
        systemd_specifier_text("vllm\\")
    with pytest.raises(UnitValueError, match="control character"):
        systemd_specifier_text("vllm\nUser=root")


# --- check_unit_inputs: every templated value, named ------------------------

ENTRY = {"description": "Lab model", "repo_id": "org/m", "served_model_name": "tiny-gqa",
         "port": 8001, "gpus": [0, 1], "env": {"A": "1"}, "serve": {}, "extra_args": []}
SETTINGS = {"vllm_service_vllm_bin": "/opt/vllm/bin/vllm", "vllm_service_model_dir": "/srv/m",
            "vllm_service_home": "/var/lib/vllm", "vllm_service_user": "vllm",
            "vllm_service_read_write_paths": ["/srv/cache"],
            "vllm_service_device_allow_extra": ["char-infiniband_verbs rw",
                                                "/dev/infiniband/rdma_cm rw"]}


def test_a_clean_entry_passes_unchanged():
    assert check_unit_inputs("tiny_gqa", ENTRY, SETTINGS) is ENTRY


@pytest.mark.parametrize(("change", "message"), [
    ({"description": "Lab model\nExecStartPre=/bin/touch /tmp/x"},
     ("catalog entry tiny_gqa: description holds a control character (U+000A, line feed) at"
     " offset 9")),
    # A YAML block scalar (`|`) ends in a newline: an accident is enough.
    ({"served_model_name": "tiny-gqa\n"},
     ("catalog entry tiny_gqa: served_model_name holds a control character (U+000A, line feed)"
     " at offset 8")),
    ({"repo_id": "org/m\r"}, "catalog entry tiny_gqa: repo_id holds a control character"),
    ({"gpus": [0, "1\nExecStartPre=/bin/touch /tmp/x"]},
     ("catalog entry tiny_gqa: gpus[1] must be a CUDA device index (0, 1, ...), got"
     " '1\\nExecStartPre=/bin/touch /tmp/x'")),
    ({"gpus": ["GPU-5f3c"]}, "catalog entry tiny_gqa: gpus[0] must be a CUDA device index"),
    ({"gpus": [True]}, "catalog entry tiny_gqa: gpus[0] must be a CUDA device index"),
    ({"gpus": "0,1"}, "catalog entry tiny_gqa: gpus must be a list of CUDA device indices"),
    ({"env": {"A": "1\n"}}, "catalog entry tiny_gqa: env.A holds a control character"),
    ({"env": {"A\nB": "1"}}, "catalog entry tiny_gqa: env.A\nB: 'A\\nB' is not an environment"),
    ({"env": ["A=1"]}, "catalog entry tiny_gqa: env must be a mapping"),
])
def test_each_catalog_field_is_refused_by_name_with_the_model(change, message):
    with pytest.raises(UnitValueError) as caught:
        check_unit_inputs("tiny_gqa", {**ENTRY, **change}, SETTINGS)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(("change", "message"), [
    ({"vllm_service_home": "/var/lib/vllm\n"}, "vllm_service_home holds a control character"),
    ({"vllm_service_home": "var/lib/vllm"}, "vllm_service_home must be an absolute path"),
    ({"vllm_service_vllm_bin": "vllm"}, "vllm_service_vllm_bin must be an absolute path"),
    ({"vllm_service_user": "vllm\nUser=root"}, "vllm_service_user holds a control character"),
    ({"vllm_service_read_write_paths": ["/ok", "/x\n"]},
     "vllm_service_read_write_paths holds a control character"),
    ({"vllm_service_read_write_paths": "/srv"}, "vllm_service_read_write_paths must be a list"),
    ({"vllm_service_device_allow_extra": ["/dev/infiniband/* rw"]},
     "vllm_service_device_allow_extra holds '/dev/infiniband/* rw'; wanted a DeviceAllow="),
    ({"vllm_service_device_allow_extra": ["/dev/x rwx"]},
     "vllm_service_device_allow_extra holds '/dev/x rwx'"),
])
def test_role_values_are_refused_by_variable_name(change, message):
    with pytest.raises(UnitValueError) as caught:
        check_unit_inputs("tiny_gqa", ENTRY, {**SETTINGS, **change})
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize("model", ["tiny_gqa\n", "Tiny", "", "-x", "a b", "tiny%i"])
def test_model_name_is_a_catalog_name_to_the_end(model):
    # preflight's `is match('^...$')` lets "tiny_gqa\n" through; fullmatch does not.
    with pytest.raises(UnitValueError, match="vllm_service_model must be a catalog name"):
        check_unit_inputs(model, ENTRY, SETTINGS)


def test_nvidia_device_nodes_are_the_control_nodes_and_the_gpus():
    assert nvidia_device_nodes([]) == []
    assert nvidia_device_nodes([2, "5"]) == ["/dev/nvidiactl", "/dev/nvidia-uvm",
                                             "/dev/nvidia-uvm-tools", "/dev/nvidia2",
                                             "/dev/nvidia5"]


# --- what a catalog entry cannot set (issue 32) ------------------------------
ANY = "0.0.0.0"  # noqa: S104 - the hostile value under test, bound nowhere
# Spellings vLLM 0.32 reads as a product-owned option (the lab image's
# vllm/utils/argparse_utils.py, FlexibleArgumentParser.parse_args: `_` -> `-`
# up to the first `.`, `--opt=value`, `--opt.key value`; the serve parser keeps
# argparse's allow_abbrev; engine/arg_utils.py get_kwargs: BooleanOptionalAction
# gives booleans a --no- form).

OWNED_WORDS = [
    ("--host", "host"), ("--host=0.0.0.0", "host"), ("--hos", "host"), ("--host.x", "host"),
    ("--port=9", "port"), ("--served_model_name", "served-model-name"),
    ("--served-model", "served-model-name"), ("--model=/srv/other", "model"), ("--mod", "model"),
    ("--enable-server-load-tracking", "enable-server-load-tracking"),
    ("--no-enable-server-load-tracking", "enable-server-load-tracking"),
    ("--no_enable_server_load", "enable-server-load-tracking"),
    ("--api-key", "api-key"), ("--api_key=k", "api-key"),
    ("--enable-sleep-mode", "enable-sleep-mode"), ("--enable_sleep", "enable-sleep-mode"),
    ("--no-enable-sleep-mode", "enable-sleep-mode"), ("--config", "config"),
    ("--config=/srv/models/x/evil.yaml", "config"),
    # Issue 44 case 5: the options that blind the probe; issue 45 case 6: listeners, routes,
    # unpickling (vLLM 0.32 engine/arg_utils.py: booleans are BooleanOptionalAction).
    ("--disable-log-stats", "disable-log-stats"), ("--disable_log_stats", "disable-log-stats"),
    ("--no-disable-log-stats", "disable-log-stats"), ("--api-server-count=4", "api-server-count"),
    ("--api_server_count", "api-server-count"), ("--api-server", "api-server-count"),
    # vLLM 0.32's short form (entrypoints/launchers/cli_args.py) and argparse's readings of it.
    ("-asc", "api-server-count"), ("-asc=2", "api-server-count"), ("-as", "api-server-count"),
    ("-a", "api-server-count"),
    ("--weight-transfer-config.backend", "weight-transfer-config"),
    ("--enable-elastic-ep", "enable-elastic-ep"),
    ("--enable-fault-tolerance", "enable-fault-tolerance"),
    ("--kv_events_config={}", "kv-events-config"), ("--enable-log-requests", "enable-log-requests"),
    ("--no-enable-log-requests", "enable-log-requests"),
]


@pytest.mark.parametrize(("word", "option"), OWNED_WORDS)
def test_every_spelling_of_an_owned_option_is_named(word, option):
    assert product_option(word) == option


@pytest.mark.parametrize("word", [
    "--max-num-seqs", "--no-such-option", "--model-impl", "--config-format", "--hostname-x",
    "--port-range", "--seed", "-tp", "-O3", "--", ANY, "host", "-host", "--HOST",
    "--compilation-config.level", "--disable-log-requests",
])
def test_other_options_and_values_are_not_owned(word):
    assert product_option(word) is None


@pytest.mark.parametrize(("kwargs", "message"), [
    # The review's input: a second --host after the product's 127.0.0.1, which argparse keeps.
    ({"extra_args": ["--host", ANY]},
     ("catalog entry m1: extra_args[0] holds '--host', which vLLM reads as --host: the product"
      " owns it (the unit binds vllm_service_host (127.0.0.1) behind the front door)")),
    ({"extra_args": ["--host=" + ANY]}, "extra_args[0] holds '--host=0.0.0.0', which vLLM reads"),
    ({"extra_args": ["--seed", "1", "--served_model_name", "x"]},
     ("catalog entry m1: extra_args[2] holds '--served_model_name', which vLLM reads as"
      " --served-model-name: the product owns it")),
    ({"options": {"served-model-name": "x"}},
     "catalog entry m1: serve.served-model-name is vLLM's --served-model-name: the product owns"),
    ({"options": {"enable_sleep_mode": True}},
     ("catalog entry m1: serve.enable_sleep_mode is vLLM's --enable-sleep-mode: the product owns"
      " it (it adds /sleep and /wake_up")),
    ({"options": {"enable_server_load_tracking": False}},
     ("catalog entry m1: serve.enable_server_load_tracking is vLLM's"
      " --enable-server-load-tracking: the product owns it (the unit always sets it")),
    ({"options": {"api_key": ["k" * 20]}}, "serve.api_key is vLLM's --api-key"),
    ({"options": {"lora_modules": ["a=/b", "--host", ANY]}},
     "catalog entry m1: serve.lora_modules holds '--host', which vLLM reads as --host"),
    ({"options": {"config": "/srv/models/x/evil.yaml"}}, "serve.config is vLLM's --config"),
    ({"extra_args": ["--model", "/srv/other"]}, "extra_args[0] holds '--model'"),
])
def test_owned_options_are_refused_in_every_field_and_spelling(kwargs, message):
    args = {"vllm_bin": "/v", "model_dir": "/m", "served_model_name": "t", "port": 1, **kwargs}
    with pytest.raises(ProductOwnedError) as caught:
        vllm_serve_argv(context="catalog entry m1", **args)
    assert message in str(caught.value)


def test_one_line_per_owned_value():
    with pytest.raises(ProductOwnedError) as caught:
        vllm_serve_argv("/v", "/m", "t", 1, {"host": ANY},
                        extra_args=["--port=9", "--seed", "1", "--api-key", "k"],
                        context="catalog entry m1")
    fields = re.findall(r"(?:^catalog entry m1: |; )([a-z_.\[\]0-9]+) ", str(caught.value))
    assert fields == ["serve.host", "extra_args[0]", "extra_args[3]"]


@pytest.mark.parametrize("name", ["VLLM_SERVER_DEV_MODE", "VLLM_API_KEY",
                                  "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "VLLM_USE_RUST_FRONTEND",
                                  "VLLM_RUST_FRONTEND_PATH", "VLLM_ALLOW_INSECURE_SERIALIZATION"])
def test_owned_environment_is_refused(name):
    with pytest.raises(ProductOwnedError) as caught:
        check_unit_inputs("tiny_gqa", {**ENTRY, "env": {"A": "1", name: "1"}}, SETTINGS)
    assert str(caught.value).startswith(
        f"catalog entry tiny_gqa: env.{name} is set ({name} is vLLM's own): the product owns it (")


@pytest.mark.parametrize("name", ["HOME", "HF_HUB_OFFLINE", "CUDA_VISIBLE_DEVICES",
                                  "NCCL_SOCKET_IFNAME"])
def test_environment_the_unit_sets_is_refused(name):
    """Issue 45 case 6: the entry's env comes after the unit's own lines and systemd keeps the
    last: HOME=/tmp or HF_HUB_OFFLINE=0 from a catalog entry would win."""
    with pytest.raises(ProductOwnedError) as caught:
        check_unit_inputs("tiny_gqa", {**ENTRY, "env": {name: "0"}}, SETTINGS)
    assert str(caught.value).startswith(
        f"catalog entry tiny_gqa: env.{name} is set: the unit sets it (")


def test_every_variable_the_unit_template_sets_is_owned():
    """The template's own Environment= lines, and the dev mode sleep_settings hands it (the
    warm switch's): each name is refused in a catalog entry's env."""
    template = (ROOT / "roles/vllm_service/templates/vllm.service.j2").read_text()
    names = set(re.findall(r"line\('Environment', '([A-Z_][A-Z0-9_]*)[=']", template))
    assert {"HOME", "HF_HUB_OFFLINE", "CUDA_VISIBLE_DEVICES"} <= names
    assert "__sleep.env | dictsort" in template
    names |= set(sleep_settings({}, "warm")["env"])
    assert "VLLM_SERVER_DEV_MODE" in names
    assert names <= set(UNIT_ENV) | set(PRODUCT_ENV) | set(CACHE_ENV)


def test_other_environment_is_kept():
    entry = {**ENTRY, "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "vllm_server_dev_mode": "1"}}
    assert check_unit_inputs("tiny_gqa", entry, SETTINGS) is entry


@pytest.mark.parametrize(("model", "message"), [
    ("fleet-probe", ("vllm_service_model 'fleet-probe' would name its unit"
                     " vllm-fleet-probe.service, among the product's own vllm-fleet-* units"
                     " (that very unit)")),
    ("fleet-replica-firewall", "vllm-fleet-replica-firewall.service, among the product's own"),
    ("fleet-nvidia-nodes", "(that very unit)"),
    ("fleet-next", "would name its unit vllm-fleet-next.service, among the product's own"),
    ("a" * 65, "vllm_service_model must be at most 64 characters, got 65"),
    ("a" * 243, "vllm_service_model must be at most 64 characters, got 243"),
])
def test_model_names_of_product_units_and_long_names_are_refused(model, message):
    with pytest.raises(UnitValueError) as caught:
        check_model_name(model)
    assert message in str(caught.value)


@pytest.mark.parametrize("model", ["fleet_probe", "a" * 64, "tiny_gqa", "my-fleet-probe"])
def test_names_beside_the_product_units_are_kept(model):
    assert check_model_name(model) == model


def test_product_units_are_every_vllm_fleet_unit_the_roles_install():
    names = set()
    for path in (ROOT / "roles").rglob("*"):
        if path.is_file():
            names |= set(re.findall(r"vllm-fleet-[a-z0-9-]+\.(?:service|timer|socket|path)",
                                    path.read_text(errors="replace")))
    assert names == set(PRODUCT_UNITS)


# The scenarios' broken values are not the product's: they must still reach
# vLLM, so that Molecule sees a failing start (molecule/*/side_effect.yml).
SCENARIO_BROKEN = [
    ("molecule/default/vars/broken-model.yml", ["--max-num-seqs", "not-a-number"]),
    ("molecule/fleet/group_vars/vllm_hosts/catalog.yml", ["--max-num-seqs", "not-a-number"]),
    ("molecule/multinode/group_vars/vllm_hosts/catalog.yml", ["--no-such-option"]),
]


@pytest.mark.parametrize(("path", "extra_args"), SCENARIO_BROKEN)
def test_the_scenarios_broken_values_are_still_accepted(path, extra_args):
    # The scenario's entry is a Jinja expression: its extra_args list, as written there.
    written = f"'extra_args': [{', '.join(repr(arg) for arg in extra_args)}]"
    assert written in (ROOT / path).read_text()
    argv = vllm_serve_argv("/v", "/m", "tiny-gqa", 8001, {"dtype": "float32"}, extra_args,
                           context="catalog entry tiny_gqa")
    assert argv[-len(extra_args):] == extra_args


def test_the_cutover_scenarios_wrong_name_entry_is_refused():
    # molecule/cutover: tiny_wrongname's second --served-model-name, now refused before any change.
    text = (ROOT / "molecule/cutover/group_vars/all.yml").read_text()
    assert "'extra_args': ['--served-model-name', 'not-the-catalog-name']" in text
    with pytest.raises(ProductOwnedError, match=(
            r"^catalog entry tiny_wrongname: extra_args\[0\] holds '--served-model-name', which "
            r"vLLM reads as --served-model-name: the product owns it")):
        vllm_serve_argv("/v", "/m", "tiny-wrongname", 8033, {},
                        ["--served-model-name", "not-the-catalog-name"],
                        context="catalog entry tiny_wrongname")


def _untemplated(value):
    if isinstance(value, dict):
        return {k: _untemplated(v) for k, v in value.items() if "{{" not in str(v)}
    return value


def test_every_shipped_catalog_entry_passes_the_request_check():
    # roles/vllm_model/defaults/main/catalog.yml, each entry and profile (templated values aside).
    catalog = yaml.safe_load(CATALOG.read_text())["vllm_fleet_catalog"]
    assert len(catalog) >= 4
    for model, entry in catalog.items():
        plain = {**_untemplated(entry), "profiles": {
            name: _untemplated(profile) for name, profile in (entry.get("profiles") or {}).items()}}
        assert check_request(model, plain, SETTINGS) is plain


def test_the_request_check_names_the_profile_that_sets_an_owned_value():
    entry = {**ENTRY, "profiles": {"sm120": {"serve": {"max_model_len": 4096}},
                                   "sm90": {"env": {"VLLM_API_KEY": "k"}}}}
    with pytest.raises(ProductOwnedError, match=(
            r"^catalog entry tiny_gqa \(profile sm90\): env.VLLM_API_KEY is set")):
        check_request("tiny_gqa", entry, SETTINGS)
    with pytest.raises(UnitValueError, match=r"would name its unit vllm-fleet-probe\.service"):
        check_request("fleet-probe", ENTRY, SETTINGS)


# --load-format (issue 35, item 5): vLLM's values are LoadFormats in
# vllm-project/vllm:vllm/model_executor/model_loader/__init__.py (e9234694f494) plus
# "instanttensor" (vllm/config/load.py at 030eb6656cb2, pull request 36139).
def test_load_format_renders_after_the_serve_options_and_auto_writes_nothing():
    base = ["/v", "serve", "/m", "--host", "127.0.0.1", "--port", "8001",
            "--served-model-name", "m", "--enable-server-load-tracking",
            "--tensor-parallel-size", "8"]
    argv = vllm_serve_argv("/v", "/m", "m", 8001, {"tensor_parallel_size": 8},
                           ["--seed", "0"], load_format="instanttensor")
    assert argv == [*base, "--load-format", "instanttensor", "--seed", "0"]
    for none in (None, "", "auto"):
        assert vllm_serve_argv("/v", "/m", "m", 8001, {"tensor_parallel_size": 8},
                               load_format=none) == base


@pytest.mark.parametrize(("value", "why"), [
    ("dummy", r"load_format 'dummy' makes vLLM serve random weights"),
    ("fast", r"load_format must be one of vLLM's auto, bitsandbytes, .*; got 'fast'"),
])
def test_load_format_refused_values(value, why):
    with pytest.raises(UnitValueError, match=rf"^catalog entry x: {why}"):
        vllm_serve_argv("/v", "/m", "m", 8001, load_format=value, context="catalog entry x")


def test_serve_load_format_is_refused_for_the_field():
    with pytest.raises(UnitValueError, match=r"serve.load_format is set; use the entry's "
                                             r"load_format field"):
        vllm_serve_argv("/v", "/m", "m", 8001, {"load_format": "pt"})


def test_request_check_refuses_a_profile_load_format_vllm_does_not_know():
    entry = {"served_model_name": "m", "port": 8001, "load_format": "safetensors",
             "profiles": {"sm90": {"load_format": "instant"}}}
    with pytest.raises(UnitValueError, match=r"^catalog entry m \(profile sm90\): load_format "
                                             r"must be one of"):
        check_request("m", entry, {})
    entry["profiles"]["sm90"]["load_format"] = "instanttensor"
    assert check_request("m", entry, {}) is entry


def test_no_catalog_model_sets_a_load_format_and_the_specs_choices_are_vllms():
    """No source supports a load format for a catalog model on its hardware yet
    (docs/catalog-sources.md): every entry and profile keeps auto (no flag)."""
    catalog = yaml.safe_load(CATALOG.read_text())["vllm_fleet_catalog"]
    for name, entry in catalog.items():
        assert "load_format" not in entry, name
        for profile in (entry.get("profiles") or {}).values():
            assert "load_format" not in profile, name
    specs = yaml.safe_load((ROOT / "roles/vllm_model/meta/argument_specs.yml").read_text())
    field = specs["argument_specs"]["main"]["options"]["vllm_model_entry"]["options"][
        "load_format"]
    assert tuple(field["choices"]) == LOAD_FORMATS


def test_a_profiles_switch_mode_is_checked_like_the_entrys():
    """The typed spec checks the entry's switch_mode; a GPU profile's reaches the unit
    checks through check_request (each profile merged over the entry)."""
    entry = {"served_model_name": "m", "port": 8001, "switch_mode": "warm",
             "profiles": {"sm120": {"switch_mode": "hot"}}}
    with pytest.raises(UnitValueError, match=r"^catalog entry m \(profile sm120\): switch_mode "
                                             r"must be cold or warm, got 'hot'"):
        check_request("m", entry, {})
    entry["profiles"]["sm120"]["switch_mode"] = "cold"
    assert check_request("m", entry, {}) is entry


# --- warm switch mode (issue 35 item 1) ---------------------------------------

DEV_MODE = {"VLLM_SERVER_DEV_MODE": "1"}  # vLLM's dev routes, the sleep routes among them


@pytest.mark.parametrize(("entry", "fleet", "expected"), [
    ({"vllm": {"variant": "cuda"}}, "warm",
     {"warm": True, "dev_mode": True, "env": DEV_MODE, "sleep_mode": True, "sleep_flag": True}),
    # vLLM-CPU refuses --enable-sleep-mode (vllm/config/model.py, 0.32); the dev routes stay.
    ({"vllm": {"variant": "cpu"}}, "warm",
     {"warm": True, "dev_mode": True, "env": DEV_MODE, "sleep_mode": True,
      "sleep_flag": False}),
    ({"vllm": {"variant": "cuda"}}, "cold",
     {"warm": False, "dev_mode": False, "env": {}, "sleep_mode": False, "sleep_flag": False}),
    ({"vllm": {"variant": "cuda"}, "switch_mode": "warm"}, "cold",
     {"warm": True, "dev_mode": True, "env": DEV_MODE, "sleep_mode": True, "sleep_flag": True}),
    ({"vllm": {"variant": "cuda"}, "switch_mode": "cold"}, "warm",
     {"warm": False, "dev_mode": False, "env": {}, "sleep_mode": False, "sleep_flag": False}),
])
def test_sleep_settings(entry, fleet, expected):
    assert sleep_settings(entry, fleet) == expected


def test_sleep_settings_refuse_an_unknown_mode_naming_the_variable():
    with pytest.raises(UnitValueError,
                       match="vllm_fleet_switch_mode must be cold or warm, got 'hot'"):
        sleep_settings({}, "hot")


def test_the_sleep_flag_follows_load_tracking_and_a_catalog_cannot_set_it():
    argv = vllm_serve_argv("/v/bin/vllm", "/m", "m", 8001, sleep_mode=True)
    assert argv[-2:] == ["--enable-server-load-tracking", "--enable-sleep-mode"]
    assert "--enable-sleep-mode" not in vllm_serve_argv("/v/bin/vllm", "/m", "m", 8001)
    with pytest.raises(ProductOwnedError, match="switch_mode: warm sets it"):
        vllm_serve_argv("/v/bin/vllm", "/m", "m", 8001, options={"enable_sleep_mode": True})
