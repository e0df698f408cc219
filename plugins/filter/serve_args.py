"""Filters that render vLLM serve options (see module_utils/serve_args.py)."""

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.serve_args import (
    systemd_exec_line,
    systemd_quote,
    vllm_serve_argv,
)


def _vllm_serve_argv(entry, vllm_bin, model_dir, host="127.0.0.1"):
    try:
        return vllm_serve_argv(
            vllm_bin=vllm_bin,
            model_dir=model_dir,
            served_model_name=entry["served_model_name"],
            port=int(entry["port"]),
            options=entry.get("serve") or {},
            extra_args=entry.get("extra_args") or [],
            host=host,
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise AnsibleFilterError(f"vllm_serve_argv: {exc}") from exc


def _systemd_exec_line(argv):
    try:
        return systemd_exec_line(argv)
    except ValueError as exc:
        raise AnsibleFilterError(f"systemd_exec_line: {exc}") from exc


class FilterModule:
    """vllm_fleet.fleet serve-argument filters."""

    def filters(self):
        return {
            "vllm_serve_argv": _vllm_serve_argv,
            "systemd_exec_line": _systemd_exec_line,
            "systemd_quote": systemd_quote,
        }
