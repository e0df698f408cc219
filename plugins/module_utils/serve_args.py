"""Render a catalog entry's `serve` options into a `vllm serve` command line.

The catalog keeps vLLM's options as data (group_vars/all/models.yml). This is
the one place that turns them into arguments, and the one place that quotes
them for a systemd ExecStart= line.
"""

import json
import re

# systemd splits ExecStart= on whitespace and honours C-style quotes; '%'
# starts a specifier and '$' a variable reference, so both are doubled.
MAX_PORT = 65535
_PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def option_flag(key):
    """`tensor_parallel_size` -> `--tensor-parallel-size`."""
    if not isinstance(key, str) or not key or key.startswith("-"):
        raise ValueError(f"serve option names are bare words like 'max_model_len', got {key!r}")
    return "--" + key.replace("_", "-")


def serve_options_argv(options):
    """Turn a dict of serve options into argv words, in the dict's order.

    true -> flag alone; false or None -> omitted; dict -> one JSON word;
    list -> the flag followed by each value; anything else -> str(value).
    """
    argv = []
    for key, value in (options or {}).items():
        flag = option_flag(key)
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, dict):
            argv.extend([flag, json.dumps(value, sort_keys=True, separators=(",", ":"))])
        elif isinstance(value, (list, tuple)):
            if not value:
                continue
            argv.append(flag)
            argv.extend(str(item) for item in value)
        elif isinstance(value, float):
            argv.extend([flag, repr(value)])
        else:
            argv.extend([flag, str(value)])
    return argv


def vllm_serve_argv(vllm_bin, model_dir, served_model_name, port, options=None,
                    extra_args=None, host="127.0.0.1"):
    """The full `vllm serve` argv for one model server."""
    reserved = {"host", "port", "served_model_name", "model"}
    clash = sorted(reserved.intersection(options or {}))
    if clash:
        raise ValueError(
            "serve options must not set "
            + ", ".join(clash)
            + ": the catalog entry's port and served_model_name fields own them"
        )
    if not isinstance(port, int) or not 0 < port <= MAX_PORT:
        raise ValueError(f"port must be an integer 1-65535, got {port!r}")
    argv = [vllm_bin, "serve", model_dir, "--host", host, "--port", str(port),
            "--served-model-name", served_model_name]
    argv.extend(serve_options_argv(options))
    argv.extend(str(arg) for arg in (extra_args or []))
    return argv


def systemd_quote(word):
    """Quote one word for an ExecStart= line."""
    word = str(word).replace("%", "%%").replace("$", "$$")
    if _PLAIN.match(word):
        return word
    escaped = word.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def systemd_exec_line(argv):
    """Join argv into an ExecStart= value, quoting each word as needed."""
    if not argv:
        raise ValueError("an ExecStart line needs at least the program")
    return " ".join(systemd_quote(word) for word in argv)
