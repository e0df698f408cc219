# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""module_utils/engine/vllm_engine.py: vLLM's interface as the product calls it (vLLM 0.32.0's
route list: tests/fixtures/vllm_routes/vllm-0.32.0-cpu-routes.txt)."""

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine import vllm_engine as engine
from repo_paths import ROOT

ROUTES = {line.split()[1] for line in
          (ROOT / "tests/fixtures/vllm_routes/vllm-0.32.0-cpu-routes.txt").read_text().splitlines()
          if line.strip() and not line.startswith("#")}


def test_every_route_the_product_calls_is_one_vllm_serves():
    called = {engine.IS_SLEEPING, engine.ABORT_REQUESTS, engine.COLLECTIVE_RPC, engine.LOAD,
              engine.METRICS, "/sleep"}
    called |= {path.partition("?")[0] for level in engine.SLEEP_LEVELS
               for _method, path, _body in engine.wake_steps(level)}
    assert called - ROUTES == set()


def test_every_control_route_the_product_calls_is_never_forwarded():
    control = {engine.IS_SLEEPING, engine.ABORT_REQUESTS, engine.COLLECTIVE_RPC, engine.LOAD,
               "/sleep", "/wake_up", "/reset_prefix_cache"}
    assert control <= set(engine.NEVER_FORWARDED)


def test_sleep_path_for_each_level_and_mode():
    assert engine.sleep_path(1, engine.SLEEP_MODE_WAIT) == "/sleep?level=1&mode=wait"
    assert engine.sleep_path(2, engine.SLEEP_MODE_ABORT) == "/sleep?level=2&mode=abort"


@pytest.mark.parametrize(("level", "mode"), [(3, "wait"), (0, "wait"), (1, "keep"), ("1", "wait")])
def test_a_level_or_mode_vllm_does_not_have_is_refused(level, mode):
    with pytest.raises(ValueError, match="wanted a sleep level in"):
        engine.sleep_path(level, mode)


def test_a_wake_from_a_level_vllm_does_not_have_is_refused():
    with pytest.raises(ValueError, match=r"wanted a sleep level in \(1, 2\), got 3"):
        engine.wake_steps(3)


@pytest.mark.parametrize(("serve", "share"), [
    ({}, 0.9), (None, 0.9), ({"gpu_memory_utilization": ""}, 0.9),  # vLLM's default
    ({"gpu_memory_utilization": 0.92}, 0.92), ({"gpu_memory_utilization": "0.85"}, 0.85),
])
def test_the_share_is_the_entrys_else_vllms_default(serve, share):
    assert engine.gpu_share(serve) == share


def test_a_share_that_is_not_a_number_is_refused_by_name():
    with pytest.raises(ValueError, match=r"gpu_memory_utilization must be a number in \(0, 1\], "
                                         r"got 'most'"):
        engine.gpu_share({"gpu_memory_utilization": "most"})
