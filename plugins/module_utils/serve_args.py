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
RESERVED_OPTIONS = ("host", "port", "served_model_name", "model", "enable_server_load_tracking")
# Always on: vLLM's /load then counts each request until the last byte of its
# response, which is what a drain before a stop waits for (frontdoor.drain()).
LOAD_TRACKING = "--enable-server-load-tracking"
# How check_unit_inputs() checks the vllm_service role's values (others: one line of text).
ROLE_VALUE_KINDS = {
    "vllm_service_vllm_bin": "path",
    "vllm_service_model_dir": "path",
    "vllm_service_home": "path",
    "vllm_service_read_write_paths": "paths",
    "vllm_service_device_allow_extra": "devices",
}


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
                    node_args=None):
    """The full `vllm serve` argv for one model server.

    `aliases`: stable names the server also answers to (served_names()).
    `node_args`: a multi-node replica's arguments for this host (--nnodes,
    --node-rank, --master-addr, --master-port, --headless on workers; from
    module_utils/multinode.py), after the serve options and before extra_args;
    none for a model on one host, whose argv is then unchanged.
    Every word is checked with unit_text(); an error names the field it came
    from, prefixed with `context` (for example "catalog entry tiny_gqa").
    """
    options = options or {}
    clash = sorted(set(RESERVED_OPTIONS).intersection(options))
    if clash:
        raise ValueError(
            f"{context}: serve options must not set "
            + ", ".join(clash)
            + ": the catalog entry's port and served_model_name fields own them"
            " (and the unit always sets " + LOAD_TRACKING + ")"
        )
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
    for key, value in options.items():
        try:
            flag = option_flag(key)
        except ValueError as exc:
            raise ValueError(f"{context}: serve: {exc}") from None
        fields.append((f"serve.{key}", _option_words(flag, value)))
    if node_args:
        fields.append(("replica layout", [str(arg) for arg in node_args]))
    fields.extend((f"extra_args[{index}]", [str(arg)])
                  for index, arg in enumerate(extra_args or []))
    argv = []
    for field, words in fields:
        argv.extend(_checked(context, field, word) for word in words)
    return argv


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


def check_unit_inputs(model, entry, settings):
    """Refuse any value that could change the structure of the model's unit.

    model: the catalog name; entry: its catalog entry; settings: the role's
    other values that go into the unit, by variable name, checked as
    ROLE_VALUE_KINDS says (text when not listed). Returns the entry
    unchanged. Errors name the field and the model, or the role variable.
    """
    model_text = str(model)
    if not _MODEL_NAME.fullmatch(model_text):
        raise UnitValueError(
            f"vllm_service_model must be a catalog name like minimax_m25 (a-z, 0-9, _ and -), "
            f"got {model_text!r}")
    context = f"catalog entry {model_text}"
    if not isinstance(entry, dict):
        raise UnitValueError(f"{context} must be a mapping, got {type(entry).__name__}")
    for field in ("description", "repo_id", "served_model_name"):
        if entry.get(field) is not None:
            _checked(context, field, entry[field])
    _check_gpus(context, entry.get("gpus") or [])
    env = entry.get("env") or {}
    if not isinstance(env, dict):
        raise UnitValueError(f"{context}: env must be a mapping, got {env!r}")
    for name, value in env.items():
        try:
            systemd_environment(name, value, field=f"env.{name}")
        except UnitValueError as exc:
            raise UnitValueError(f"{context}: {exc}") from None
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


def nvidia_device_nodes(gpus):
    """The NVIDIA device nodes a model on these CUDA device indices opens."""
    if not gpus:
        return []
    return [*NVIDIA_CONTROL_NODES, *(f"/dev/nvidia{int(gpu)}" for gpu in gpus)]
