# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Filters frontdoor_upstream, frontdoor_routes, never_forwarded, local_address and
model_states: the front door's upstream, allowlist, the routes no proxy forwards, the address
a listener is reached at from its own host, and the record's models with their state."""

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.filters import module_util_filter

# module_utils imported at a filter's first call (why: plugins/plugin_utils/filters.py).


def _frontdoor_upstream(port=None, model=None, host="127.0.0.1"):
    """The same text vllm_cutover writes (module_utils/frontdoor/frontdoor.py: upstream_conf).

    Without a port the front door is idle (no model deployed), not switching.
    """
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
        upstream_conf,
    )

    try:
        return upstream_conf(None if port in (None, "") else int(port), host=host, model=model,
                             switching=False)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"frontdoor_upstream wants a port number or none: {exc}") from exc


def _frontdoor_routes(routes):
    """vllm_frontdoor_api_routes, checked (module_utils/frontdoor/frontdoor.py: api_routes)."""
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
        api_routes,
    )

    try:
        return api_routes(routes)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(str(exc)) from exc


def _never_forwarded(own):
    """vLLM's routes no proxy forwards (module_utils/engine/vllm_engine.py: NEVER_FORWARDED) with
    `own`, the paths the proxy keeps for itself, added: one sorted list without repeats."""
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.vllm_engine import (
        NEVER_FORWARDED,
    )

    if not isinstance(own, (list, tuple)) or not all(
            isinstance(path, str) and path.startswith("/") for path in own):
        raise AnsibleFilterError(
            f"never_forwarded wants a list of paths such as /health, got {own!r}")
    return sorted(set(NEVER_FORWARDED) | set(own))


class FilterModule:
    """vllm_fleet.fleet front door filters."""

    def filters(self):
        return {"frontdoor_upstream": _frontdoor_upstream, "frontdoor_routes": _frontdoor_routes,
                "never_forwarded": _never_forwarded,
                "local_address": module_util_filter("local_address", "switch.listener"),
                "model_states": module_util_filter("model_states", "frontdoor.frontdoor")}
