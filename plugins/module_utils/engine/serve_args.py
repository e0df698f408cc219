# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Render a catalog entry into a `vllm serve` command line and a systemd unit's values.

The catalog keeps vLLM's options as data (the vllm_model role's catalog). This
is the one place that turns them into arguments, the one place that checks
every value that goes into the unit, and the one place that quotes values for
each kind of unit directive.

How systemd reads the values we write (systemd.syntax(7), systemd.service(5)
"Command lines", systemd.exec(5) Environment=, systemd 252 sources
src/shared/conf-parser.c, src/basic/extract-word.c):

- A unit file is read line by line; `\\n`, `\\r` and NUL all end a line, and a
  line whose last backslash is unescaped continues on the next line. So no
  value may hold a control character, and no value may end a line with a
  backslash: either would let a catalog value write or swallow directives.
- `ExecStart=`: split into words at space/tab; `"..."` and `'...'` quote (also
  mid-word); a backslash starts a C escape (`\\\\`, `\\"`, `\\n`, `\\x41`, ...)
  inside and outside quotes; then each word has its `%` specifiers expanded
  (`%%` is a literal `%`) and, at start, `$VAR`/`${VAR}` replaced (`$$` is a
  literal `$`). A lone unquoted `;` separates commands; the first word takes
  prefixes (`-@:+!`) and must be an absolute path.
- `Environment=`: split and unquoted like a command line, `%` specifiers
  expanded; `$` has NO meaning there, so it is written as is.
- `ReadWritePaths=`, `DeviceAllow=`: a word split and unquoted the same way,
  `%` specifiers expanded.
- `Description=`, `User=`, `WorkingDirectory=` ...: the rest of the line, no
  quoting at all, `%` specifiers expanded.
"""

import json
import re

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.record import unit_name

MAX_PORT = 65535
# Characters that mean nothing to systemd in a word: such a word needs no quotes.
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
# C0 controls, DEL and C1 controls (Unicode category Cc).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_NAMES = {"\n": "line feed", "\r": "carriage return", "\x00": "NUL", "\t": "tab",
                  "\x0b": "vertical tab", "\x0c": "form feed", "\x1b": "escape",
                  "\x7f": "delete", "\x85": "next line"}
_OPTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MODEL_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
_GPU_INDEX = re.compile(r"[0-9]+")
# DeviceAllow=: a node under /dev (no globs there) or a driver name from
# /proc/devices (a glob is allowed there: char-nvidia*), then the access.
_DEVICE_SPEC = re.compile(r"(/dev/[^\s\"'\\*?\[]+|(char|block)-[A-Za-z0-9_.+*-]+)( [rwm]{1,3})?")
NVIDIA_CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
# vLLM options the product owns, by vLLM 0.32's option name, and why. A catalog
# entry's `serve` keys, `extra_args` and any word of their values may not reach
# them in any spelling vLLM 0.32 accepts (product_option() says which):
# - FlexibleArgumentParser.parse_args (vllm/utils/argparse_utils.py) turns `_`
#   into `-` in an option's name (up to its first `.`), splits `--opt=value`,
#   and turns `--opt.key value` into `--opt '{"key": value}'`;
# - the serve parser is an argparse parser with allow_abbrev left on (Python
#   3.11), so `--hos` is `--host` when no other option starts so;
# - boolean options take `--no-<name>` too (engine/arg_utils.py get_kwargs:
#   argparse.BooleanOptionalAction);
# - one has a short form: `-asc` is --api-server-count (vllm/entrypoints/launchers/
#   cli_args.py); argparse reads `-asc=2`, and its abbreviations `-as` and `-a`, as it
#   (SHORT_OPTIONS; `-tp`, `-q`, `-O` ... are others').
PRODUCT_OPTIONS = {
    "host": "the unit binds vllm_service_host (127.0.0.1) behind the front door",
    "port": "the catalog entry's port field sets it",
    "served-model-name": ("the catalog entry's served_model_name field and vllm_fleet_model_alias "
                          "set it"),
    "model": "the unit serves the model folder the product downloaded",
    "enable-server-load-tracking": "the unit always sets it: a drain reads /load",
    "api-key": "client keys live at the front door (vllm_frontdoor_api_keys)",
    "enable-sleep-mode": ("it adds /sleep and /wake_up, which put a model to sleep behind the "
                          "product's back; switch_mode: warm sets it (vllm_fleet_switch_mode)"),
    "config": "it reads options from a file, past these checks",
    "uds": "it serves the API on a Unix socket, past the front door",
    "grpc-port": "it opens a second (gRPC) API port, past the front door's routes and keys",
    "allowed-local-media-path": ("clients could read the host's files through it (vLLM's "
                                 "security guide); send media inline"),
    # What the probe reads (issue 44 case 5): it tells a busy engine from a dead one by
    # vLLM's counters on /metrics.
    "disable-log-stats": ("it removes vLLM's counters from /metrics, by which the probe tells a "
                          "busy engine from a dead one (it would restart a saturated engine)"),
    "api-server-count": ("with more than one API server /metrics answers for one of them "
                         "(vllm-project/vllm pull request 22227): the probe and the drain read "
                         "the engine's counters and /load there"),
    # Listeners, routes and unpickling a catalog entry must not add (issue 45 case 6;
    # vLLM 0.32 engine/arg_utils.py).
    "weight-transfer-config": ("it sets up a channel that loads weights into the running "
                               "model from outside the product"),
    "enable-elastic-ep": "it lets the engine take in and drop expert-parallel ranks at run time",
    "enable-fault-tolerance": "it adds engine control the product's probe and switch do not know",
    "kv-events-config": "it opens a publisher of KV cache events on a socket of its own",
    "enable-log-requests": ("it writes request parameters (and at DEBUG the prompts) into the "
                            "journal"),
}
# Short forms of product options (vLLM 0.32), by their word.
SHORT_OPTIONS = {"-asc": "api-server-count"}
# The boolean ones also take `--no-<name>`.
_NEGATABLE = ("enable-server-load-tracking", "enable-sleep-mode", "disable-log-stats",
              "enable-elastic-ep", "enable-fault-tolerance", "enable-log-requests")
RESERVED_OPTIONS = tuple(name.replace("-", "_") for name in PRODUCT_OPTIONS)
# Environment variables vLLM 0.32 reads (vllm/envs.py) that change what the
# server answers or who may ask it: the product owns them.
PRODUCT_ENV = {
    "VLLM_SERVER_DEV_MODE": "it adds the development routes (/reset_prefix_cache, /sleep, "
                            "/collective_rpc ...)",
    "VLLM_API_KEY": ("client keys live at the front door (vllm_frontdoor_api_keys); vLLM reads "
                     "it as --api-key"),
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": ("it adds /v1/load_lora_adapter and "
                                         "/v1/unload_lora_adapter, which load weights at run time"),
    "VLLM_USE_RUST_FRONTEND": ("it replaces the API server the product runs (and opens "
                               "--grpc-port)"),
    "VLLM_RUST_FRONTEND_PATH": "it names a program to run as the API server",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": ("it lets vLLM unpickle what it is sent (with "
                                          "weight_transfer_config, code from outside)"),
}
# Where vLLM, torch's inductor and Triton keep what they compile (and load back
# with dlopen): every unit sets them under the service home (cache_environment()).
# Unset, inductor's goes to /tmp/torchinductor_<user>
# (torch/_inductor/runtime/cache_dir_utils.py default_cache_dir), which
# PrivateTmp= empties at every start and hardened hosts mount noexec. A catalog
# entry's env may not move them: the product owns them like PRODUCT_ENV.
CACHE_ENV = {
    "VLLM_CACHE_ROOT": "vllm",
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
    "TRITON_CACHE_DIR": "triton",
}
# What the unit sets itself (roles/vllm_service/templates/vllm.service.j2): a catalog
# entry's env comes after these lines, and systemd keeps the last assignment, so an
# entry could move the home, let vLLM ask the Hub at start, or renumber the GPUs
# (issue 45 case 6). Refused like PRODUCT_ENV; test_serve_args.py reads the template's
# Environment= lines and holds each of them here, in PRODUCT_ENV or in CACHE_ENV.
UNIT_ENV = {
    "HOME": "the unit sets it to the service home (vllm_service_home)",
    "HF_HUB_OFFLINE": ("the unit serves the folder the product downloaded and verified; vLLM "
                       "never asks the Hub at start"),
    "PYTHONUNBUFFERED": "the journal gets vLLM's lines as they are written (the switch reads them)",
    "CUDA_DEVICE_ORDER": "CUDA numbers the GPUs in PCI bus order, as nvidia-smi and gpus do",
    "CUDA_VISIBLE_DEVICES": "the catalog entry's gpus field sets it",
    "GLOO_SOCKET_IFNAME": ("the ranks of one host talk over loopback; a replica's interface comes "
                           "from the inventory"),
    "NCCL_SOCKET_IFNAME": ("the ranks of one host talk over loopback; a replica's interface comes "
                           "from the inventory"),
}
CACHE_ENV_WHY = ("the unit keeps compiled kernels under the service home "
                 "(vllm_service_home/.cache/), where a restart finds them and a noexec /tmp "
                 "cannot stop them loading")
# Model names whose unit (vllm-<name>.service) would be one of the product's
# own units: every unit the roles install is named vllm-fleet-*
# (tests/unit/plugins/module_utils/test_serve_args.py reads them from roles/).
PRODUCT_UNIT_PREFIX = "fleet-"
PRODUCT_UNITS = ("vllm-fleet-nvidia-nodes.service", "vllm-fleet-probe.service",
                 "vllm-fleet-probe.timer", "vllm-fleet-replica-firewall.service",
                 "vllm-fleet-model-firewall.service",
                 "vllm-fleet-frontdoor-boot.service", "vllm-fleet-reboot-lock.service")
# A model name's longest: its unit vllm-<name>.service, its link, its rank
# file and its journal identifier stay far under systemd's 255-character unit
# names and Linux's 255-byte file names, and a name still reads in a table.
MODEL_NAME_MAX = 64
# Always on: vLLM's /load then counts each request until the last byte of its
# response, which is what a drain before a stop waits for (frontdoor.drain()).
LOAD_TRACKING = "--enable-server-load-tracking"
# A warm switch puts a model to sleep and wakes it (docs/warm-switch.md): its unit
# sets the product-owned VLLM_SERVER_DEV_MODE=1 (the /sleep, /wake_up, /is_sleeping,
# /collective_rpc routes; loopback only, the front door and the balancer answer 404
# to them) and passes SLEEP_MODE - except the CPU build, which refuses the flag:
# vLLM 0.32 vllm/config/model.py ModelConfig.__post_init__ raises "Sleep mode is not
# supported on current platform." unless Platform.is_sleep_mode_available()
# (vllm/platforms/interface.py: CUDA, ROCm, XPU). Its dev-mode /sleep still pauses
# the scheduler (v1/worker/cpu_worker.py: "sleep mode is not supported on CPU,
# ignore it." - nothing is freed), so the lab's switch runs the same control path.
SLEEP_MODE = "--enable-sleep-mode"
DEV_MODE_ENV = ("VLLM_SERVER_DEV_MODE", "1")
SLEEP_FLAG_REFUSED_VARIANTS = ("cpu",)
# How check_unit_inputs() checks the vllm_service role's values (others: one line of text).
ROLE_VALUE_KINDS = {
    "vllm_service_vllm_bin": "path",
    "vllm_service_model_dir": "path",
    "vllm_service_home": "path",
    "vllm_service_read_write_paths": "paths",
    "vllm_service_device_allow_extra": "devices",
}


# vLLM's --load-format values: LoadFormats in vllm/model_executor/model_loader/
# __init__.py (vllm-project/vllm at e9234694f494: auto, bitsandbytes, dummy,
# fastsafetensors, gguf, mistral, npcache, pt, runai_streamer,
# runai_streamer_sharded, safetensors, sharded_state, tensorizer) and
# "instanttensor", added later (LoadConfig's list in vllm/config/load.py at
# 030eb6656cb2; vllm-project/vllm pull request 36139). "dummy" is left out: it
# serves random weights ("mainly for profiling"). "auto" writes no flag.
LOAD_FORMATS = ("auto", "bitsandbytes", "fastsafetensors", "gguf", "instanttensor", "mistral",
                "npcache", "pt", "runai_streamer", "runai_streamer_sharded", "safetensors",
                "sharded_state", "tensorizer")


class UnitValueError(ValueError):
    """A value cannot be written into a systemd unit as it is."""


def control_character(text):
    """Describe the first control character in text, or None if it has none."""
    found = _CONTROL.search(text)
    if not found:
        return None
    char = found.group()
    name = _CONTROL_NAMES.get(char)
    label = f"U+{ord(char):04X}" + (f", {name}" if name else "")
    return f"a control character ({label}) at offset {found.start()}"


def unit_text(field, value):
    """`value` as text that is safe on one unit line, or UnitValueError naming field."""
    text = str(value)
    problem = control_character(text)
    if problem is None:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            problem = "text that is not valid UTF-8"
    if problem:
        raise UnitValueError(
            f"{field} holds {problem}: {text!r}; a value written into a systemd unit must be "
            "one line of printable text")
    return text


def option_flag(key):
    """`tensor_parallel_size` -> `--tensor-parallel-size`."""
    if not isinstance(key, str) or not _OPTION_NAME.fullmatch(key):
        raise ValueError(f"serve option names are bare words like 'max_model_len', got {key!r}")
    return "--" + key.replace("_", "-")


class ProductOwnedError(ValueError):
    """A catalog value sets what the product owns (PRODUCT_OPTIONS, PRODUCT_ENV)."""


def product_option(word):
    """The product-owned vLLM option (PRODUCT_OPTIONS) that argv word `word` sets, or None.

    Read as vLLM 0.32 reads it: a word that starts with `--` is an option
    wherever it stands (argparse reads `--x` after an option that wants a
    value as the next option, not as the value); its name ends at the first
    `=` (`--host=0.0.0.0`) or `.` (`--host.x 1`); `_` is `-`; a name that
    starts some product option's name (or its `no-` form) is refused, as an
    abbreviation argparse would accept, or an ambiguous one it would refuse.
    No option of vLLM 0.32 is itself a strict prefix of these names.
    """
    text = str(word)
    if text.startswith("-") and not text.startswith("--"):
        short = text.split("=", 1)[0]
        return next((option for form, option in SHORT_OPTIONS.items()
                     if len(short) > 1 and form.startswith(short)), None)
    if not text.startswith("--"):
        return None
    name = text[2:].split("=", 1)[0].split(".", 1)[0].replace("_", "-")
    if not name:
        return None  # `--` alone: argparse's end of options
    for option in PRODUCT_OPTIONS:
        forms = [option, f"no-{option}"] if option in _NEGATABLE else [option]
        if any(form.startswith(name) for form in forms):
            return option
    return None


def _owned_option_problems(options, fields):
    """One line per serve key and per catalog word that reaches a product-owned option."""
    problems = []
    for key in options:
        option = product_option(option_flag(key))
        if option:
            problems.append(f"serve.{key} is vLLM's --{option}: the product owns it "
                            f"({PRODUCT_OPTIONS[option]})")
    for field, words in fields:
        for word in words:
            option = product_option(word)
            if option:
                problems.append(
                    f"{field} holds {str(word)!r}, which vLLM reads as --{option}: the product "
                    f"owns it ({PRODUCT_OPTIONS[option]})")
    return problems


def _raise_owned(context, problems):
    if problems:
        raise ProductOwnedError(f"{context}: " + "; ".join(problems))


def _option_words(flag, value):
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    if isinstance(value, dict):
        return [flag, json.dumps(value, sort_keys=True, separators=(",", ":"))]
    if isinstance(value, (list, tuple)):
        return [flag, *(str(item) for item in value)] if value else []
    if isinstance(value, float):
        return [flag, repr(value)]
    return [flag, str(value)]


def serve_options_argv(options):
    """Turn a dict of serve options into argv words, in the dict's order.

    true -> flag alone; false or None -> omitted; dict -> one JSON word;
    list -> the flag followed by each value; anything else -> str(value).
    """
    argv = []
    for key, value in (options or {}).items():
        argv.extend(_option_words(option_flag(key), value))
    return argv


def served_names(served_model_name, aliases=None):
    """The names the server answers to: the model's own first, then each alias once.

    vLLM 0.32 takes several `--served-model-name` values: "If multiple names are
    provided, the server will respond to any of the provided names. The model name in
    the model field of a response will be the first name in this list" (and the
    metrics' model_name label takes the first too): vllm/config/model.py,
    ModelConfig.served_model_name. So responses and metrics keep naming the model
    itself, and a client that asks for the alias is served by whichever model is active.
    An empty alias is none; one equal to the model's own name adds nothing.
    """
    if isinstance(aliases, str):
        aliases = [aliases]
    names = [str(served_model_name)]
    for alias in aliases or []:
        if not isinstance(alias, str):
            raise TypeError(f"model alias must be text, got {alias!r}")
        if alias and alias.strip() != alias:
            raise ValueError(f"model alias must not start or end with white space, got {alias!r}")
        if alias and alias not in names:
            names.append(alias)
    return names


def vllm_serve_argv(vllm_bin, model_dir, served_model_name, port, options=None,
                    extra_args=None, host="127.0.0.1", context="catalog entry", aliases=None,
                    node_args=None, load_format=None, sleep_mode=False):
    """The full `vllm serve` argv for one model server.

    `sleep_mode`: add SLEEP_MODE after the load-tracking flag (sleep_settings()
    decides it; catalog options may not set it, PRODUCT_OPTIONS).

    `aliases`: stable names the server also answers to (served_names()).
    `load_format`: the entry's load_format field (load_format_argv()), after the
    serve options; `serve.load_format` is refused (one place sets it).
    `node_args`: a multi-node replica's arguments for this host (--nnodes,
    --node-rank, --master-addr, --master-port, --headless on workers; from
    module_utils/fleet/multinode.py), after the serve options and before extra_args;
    none for a model on one host, whose argv is then unchanged.
    Every word is checked with unit_text(); an error names the field it came
    from, prefixed with `context` (for example "catalog entry tiny_gqa").
    """
    options = options or {}
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port <= MAX_PORT:
        raise ValueError(f"{context}: port must be an integer 1-65535, got {port!r}")
    fields = [("vllm program", [str(vllm_bin), "serve"]),
              ("model folder", [str(model_dir)]),
              ("host", ["--host", str(host), "--port", str(port)]),
              ("served_model_name", ["--served-model-name", str(served_model_name)])]
    try:
        names = served_names(served_model_name, aliases)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{context}: {exc}") from None
    fields.extend(("vllm_service_model_alias", [alias]) for alias in names[1:])
    fields.append(("drain", [LOAD_TRACKING]))
    if sleep_mode:
        fields.append(("switch_mode", [SLEEP_MODE]))
    for key in options:
        try:
            option_flag(key)
        except ValueError as exc:
            raise ValueError(f"{context}: serve: {exc}") from None
    if "load_format" in options:
        raise UnitValueError(f"{context}: serve.load_format is set; use the entry's load_format "
                             "field (checked against vLLM's values, set per GPU profile)")
    node_words = [("replica layout", [str(arg) for arg in node_args])] if node_args else []
    load_words = load_format_argv(load_format, context)
    node_words = ([("load_format", load_words)] if load_words else []) + node_words
    catalog = [(f"serve.{key}", _option_words(option_flag(key), value))
               for key, value in options.items()]
    catalog.extend((f"extra_args[{index}]", [str(arg)])
                   for index, arg in enumerate(extra_args or []))
    fields.extend(catalog[:len(options)] + node_words + catalog[len(options):])
    argv = []
    for field, words in fields:
        argv.extend(_checked(context, field, word) for word in words)
    # Every serve key (even one whose false value writes no word) and every
    # word of the serve values and extra_args.
    _raise_owned(context, _owned_option_problems(
        options, [(field, words[1:]) for field, words in catalog[:len(options)]]
        + catalog[len(options):]))
    return argv


def sleep_settings(entry, fleet_mode="cold"):
    """How a model's unit takes part in a warm switch: {warm, dev_mode, env, sleep_flag,
    sleep_mode}.

    warm: the entry's switch_mode, else `fleet_mode` (vllm_fleet_switch_mode), is
    warm. dev_mode: the unit sets DEV_MODE_ENV (the sleep routes); env: that setting as
    the unit template writes it ({} when cold). sleep_flag: it
    passes SLEEP_MODE (not on a variant in SLEEP_FLAG_REFUSED_VARIANTS). sleep_mode:
    what green's record says - the model can be put to sleep (warm). A cold model
    gets none of them, and its unit is what it was before warm switches existed.
    """
    mode = (entry or {}).get("switch_mode") or fleet_mode or "cold"
    if mode not in ("cold", "warm"):
        source = "switch_mode" if (entry or {}).get("switch_mode") else "vllm_fleet_switch_mode"
        raise UnitValueError(f"{source} must be cold or warm, got {mode!r}")
    warm = mode == "warm"
    variant = ((entry or {}).get("vllm") or {}).get("variant")
    return {"warm": warm, "dev_mode": warm, "sleep_mode": warm,
            "env": dict([DEV_MODE_ENV]) if warm else {},
            "sleep_flag": warm and variant not in SLEEP_FLAG_REFUSED_VARIANTS}


def load_format_argv(load_format, context="catalog entry"):
    """The entry's load_format as argv words: none for absent or auto, else --load-format X."""
    if load_format in (None, "", "auto"):
        return []
    if load_format == "dummy":
        raise UnitValueError(
            f"{context}: load_format 'dummy' makes vLLM serve random weights (it is for "
            "profiling); wanted one of " + ", ".join(LOAD_FORMATS))
    if load_format not in LOAD_FORMATS:
        raise UnitValueError(
            f"{context}: load_format must be one of vLLM's {', '.join(LOAD_FORMATS)}; "
            f"got {load_format!r}")
    return ["--load-format", load_format]


def _checked(context, field, value):
    try:
        return unit_text(field, value)
    except UnitValueError as exc:
        raise UnitValueError(f"{context}: {exc}") from None


def _quote_word(word, dollar):
    """Quote one word of a list-valued directive; `dollar`: `$` is special there."""
    word = word.replace("%", "%%")
    if dollar:
        word = word.replace("$", "$$")
    if _PLAIN.fullmatch(word):
        return word
    escaped = word.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def systemd_quote(word):
    """Quote one word for an ExecStart= line (`%` and `$` doubled, quoted if not plain)."""
    return _quote_word(unit_text("command-line word", word), dollar=True)


def systemd_exec_line(argv):
    """Join argv into an ExecStart= value, quoting each word as needed."""
    if not argv:
        raise ValueError("an ExecStart line needs at least the program")
    if not str(argv[0]).startswith("/"):
        raise ValueError(f"an ExecStart program must be an absolute path, got {argv[0]!r}")
    return " ".join(systemd_quote(word) for word in argv)


def systemd_word(word):
    """Quote one word for Environment=, ReadWritePaths= ... (`%` doubled, `$` kept)."""
    return _quote_word(unit_text("unit word", word), dollar=False)


def systemd_environment(name, value, field=None):
    """One Environment= assignment `NAME=value`, quoted; `$` stays literal."""
    name = str(name)
    field = field or f"environment variable {name}"
    if not _ENV_NAME.fullmatch(name):
        raise UnitValueError(
            f"{field}: {name!r} is not an environment variable name (letters, digits and _, "
            "not starting with a digit)")
    return _quote_word(f"{name}={unit_text(field, value)}", dollar=False)


def systemd_specifier_text(value, field="unit value"):
    """A whole-line value (Description=, User=, WorkingDirectory=): `%` doubled.

    Such a value ends the line, so it must not end in a backslash either.
    """
    text = unit_text(field, value)
    if text.endswith("\\"):
        raise UnitValueError(
            f"{field} ends in a backslash, which systemd reads as a line continuation: {text!r}")
    return text.replace("%", "%%")


def _check_path(field, value):
    text = unit_text(field, value)
    if not text.startswith("/"):
        raise UnitValueError(f"{field} must be an absolute path, got {text!r}")
    return text


def check_model_name(model, variable="vllm_service_model"):
    """The model's catalog name as text, or UnitValueError naming `variable`.

    A name is a catalog key (a-z, 0-9, _ and -, to its end), at most
    MODEL_NAME_MAX characters, and not in the product's own unit names: the
    model's unit is vllm-<name>.service, and the product's are vllm-fleet-*.
    """
    text = str(model)
    if not _MODEL_NAME.fullmatch(text):
        raise UnitValueError(
            f"{variable} must be a catalog name like minimax_m25 (a-z, 0-9, _ and -), "
            f"got {text!r}")
    if len(text) > MODEL_NAME_MAX:
        raise UnitValueError(
            f"{variable} must be at most {MODEL_NAME_MAX} characters, got {len(text)}: "
            f"{text[:MODEL_NAME_MAX]!r}...")
    if text.startswith(PRODUCT_UNIT_PREFIX):
        unit = unit_name(text)
        same = " (that very unit)" if unit in PRODUCT_UNITS else ""
        raise UnitValueError(
            f"{variable} {text!r} would name its unit {unit}, among the product's own vllm-fleet-* "
            f"units{same}: {', '.join(PRODUCT_UNITS)}; choose a name that does not start with "
            f"{PRODUCT_UNIT_PREFIX!r}")
    return text


def check_request(model, entry, settings, host="127.0.0.1", alias=""):
    """Before anything is downloaded: the unit's checks, on every way the entry can be served.

    The same checks the unit template makes (check_unit_inputs, then
    vllm_serve_argv), on the entry as it is and as each of its GPU profiles
    (module_utils/fit/catalog_profile.py) would serve it: which profile applies
    is known only once the GPUs are read, after the request phase. `settings`
    are the role values the template passes (vllm_service_vllm_bin and
    vllm_service_model_dir among them). A multi-node entry's own arguments
    are its replica plan's (module_utils/fleet/multinode.py), checked in the
    preflight. Returns the entry unchanged.
    """
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit.catalog_profile import (
        apply_profile,
    )

    model_text = check_model_name(model)
    if not isinstance(entry, dict):
        raise UnitValueError(
            f"catalog entry {model_text} must be a mapping, got {type(entry).__name__}")
    profiles = entry.get("profiles") or {}
    if not isinstance(profiles, dict):
        raise UnitValueError(f"catalog entry {model_text}: profiles must be a mapping")
    served = [("", {k: v for k, v in entry.items() if k != "profiles"})]
    served.extend((f" (profile {name})", apply_profile(entry, name, overlay)[0])
                  for name, overlay in sorted(profiles.items(), key=lambda item: str(item[0])))
    for label, effective in served:
        context = f"catalog entry {model_text}{label}"
        try:
            check_unit_inputs(model_text, effective, settings)
            port = effective.get("port")
            vllm_serve_argv(settings.get("vllm_service_vllm_bin", "/vllm"),
                            settings.get("vllm_service_model_dir", "/model"),
                            effective.get("served_model_name"),
                            int(port) if isinstance(port, str) and port.isdigit() else port,
                            effective.get("serve") or {}, effective.get("extra_args") or [],
                            host=host, context=context, aliases=[alias] if alias else [],
                            load_format=effective.get("load_format"))
        except ValueError as exc:
            message = str(exc)
            if label and message.startswith(f"catalog entry {model_text}: "):
                message = context + message[len(f"catalog entry {model_text}"):]
            raise type(exc)(message) from None
    return entry


def check_unit_inputs(model, entry, settings):
    """Refuse any value that could change the structure of the model's unit.

    model: the catalog name; entry: its catalog entry; settings: the role's
    other values that go into the unit, by variable name, checked as
    ROLE_VALUE_KINDS says (text when not listed). Returns the entry
    unchanged. Errors name the field and the model, or the role variable.
    """
    model_text = check_model_name(model)
    context = f"catalog entry {model_text}"
    if not isinstance(entry, dict):
        raise UnitValueError(f"{context} must be a mapping, got {type(entry).__name__}")
    for field in ("description", "repo_id", "served_model_name"):
        if entry.get(field) is not None:
            _checked(context, field, entry[field])
    _check_gpus(context, entry.get("gpus") or [])
    if entry.get("switch_mode") not in (None, "cold", "warm"):
        raise UnitValueError(f"{context}: switch_mode must be cold or warm, got "
                             f"{entry['switch_mode']!r}")
    env = entry.get("env") or {}
    if not isinstance(env, dict):
        raise UnitValueError(f"{context}: env must be a mapping, got {env!r}")
    for name, value in env.items():
        try:
            systemd_environment(name, value, field=f"env.{name}")
        except UnitValueError as exc:
            raise UnitValueError(f"{context}: {exc}") from None
    _raise_owned(context, [
        f"env.{name} is set ({name} is vLLM's own): the product owns it ({PRODUCT_ENV[name]})"
        for name in env if name in PRODUCT_ENV] + [
        f"env.{name} is set: the product owns it ({CACHE_ENV_WHY})"
        for name in env if name in CACHE_ENV] + [
        f"env.{name} is set: the unit sets it ({UNIT_ENV[name]})"
        for name in env if name in UNIT_ENV])
    for name, value in settings.items():
        _check_setting(name, value)
    return entry


def _check_gpus(context, gpus):
    if isinstance(gpus, (str, dict)):
        raise UnitValueError(f"{context}: gpus must be a list of CUDA device indices, got {gpus!r}")
    for index, gpu in enumerate(gpus):
        if isinstance(gpu, bool) or not _GPU_INDEX.fullmatch(str(gpu)):
            raise UnitValueError(
                f"{context}: gpus[{index}] must be a CUDA device index (0, 1, ...), got {gpu!r}")


def _check_setting(name, value):
    kind = ROLE_VALUE_KINDS.get(name, "text")
    values = value if kind in ("paths", "devices") else [value]
    if isinstance(values, (str, dict)):
        raise UnitValueError(f"{name} must be a list, got {values!r}")
    for item in values:
        if kind == "devices":
            text = unit_text(name, item)
            if not _DEVICE_SPEC.fullmatch(text):
                raise UnitValueError(
                    f"{name} holds {text!r}; wanted a DeviceAllow= spec like "
                    "'/dev/infiniband/uverbs0 rw' or 'char-infiniband_verbs rw'")
        elif kind in ("path", "paths"):
            _check_path(name, item)
        else:
            unit_text(name, item)


def nvidia_device_nodes(gpus, gpu_facts=None):
    """The NVIDIA device nodes a model on these CUDA device indices opens.

    gpus: CUDA device indices as this host or container numbers them (with
    CUDA_DEVICE_ORDER=PCI_BUS_ID, nvidia-smi's index). gpu_facts: the
    gpu_facts module's result for this host; each GPU's node is then
    /dev/nvidia<minor>, its "Device Minor" from the driver
    (/proc/driver/nvidia/gpus/<bus>/information, or nvidia-smi -q's "Minor
    Number"), which differs from the index where a container was given some of
    the host's GPUs (host GPUs 4-7 are CUDA devices 0-3 there, their nodes stay
    /dev/nvidia4-7). Without facts listing GPUs, the minor is taken to be the
    index (a whole host, the usual case). A GPU the facts do not list is an
    error: the unit would allow a node CUDA does not open.
    """
    if not gpus:
        return []
    listed = (gpu_facts or {}).get("gpus") or []
    if not listed:
        return [*NVIDIA_CONTROL_NODES, *(f"/dev/nvidia{int(gpu)}" for gpu in gpus)]
    minors = {}
    for gpu in listed:
        minor = gpu.get("minor_number")
        minors[int(gpu["index"])] = int(gpu["index"]) if minor is None else int(minor)
    unknown = [int(gpu) for gpu in gpus if int(gpu) not in minors]
    if unknown:
        raise UnitValueError(
            f"gpus lists CUDA device {', '.join(str(gpu) for gpu in unknown)}, but this host's "
            f"GPU facts list CUDA devices {', '.join(str(i) for i in sorted(minors))} "
            "(nvidia-smi's index, in PCI bus order): list those indices in the catalog entry")
    return [*NVIDIA_CONTROL_NODES, *(f"/dev/nvidia{minors[int(gpu)]}" for gpu in gpus)]


def cache_environment(home):
    """{variable: folder} of the compile caches every model unit sets, under the service home.

    One folder each for all the home's models and vLLM versions
    (home/.cache/vllm, .../torchinductor, .../triton): the caches key their
    entries by what was compiled and by the vLLM, torch and Triton versions and
    the device (vLLM leaves VLLM_CACHE_ROOT itself out of its hash, vllm/envs.py),
    and write each entry atomically (a temporary file renamed, or under a file
    lock), as a model's tensor-parallel ranks already share them; so a restart
    of a model finds its kernels, a second model reuses the kernels they share,
    and a new vLLM compiles its own beside the old.
    VLLM_CACHE_ROOT is vLLM's default for a user whose HOME is the service home,
    which the lab's image fills ahead (lab/bake.yml, vLLM's modelinfos).
    """
    root = _check_path("vllm_service_home", home).rstrip("/")
    return {variable: f"{root}/.cache/{folder}"
            for variable, folder in CACHE_ENV.items()}
