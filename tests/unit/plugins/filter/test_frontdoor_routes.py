# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""frontdoor_routes: the front door's allowlist (vllm_frontdoor_api_routes), checked.

The routes are vLLM 0.32.0's, from tests/fixtures/vllm_routes/vllm-0.32.0-cpu-routes.txt
(every route its API server can register; SOURCE.md says how it was listed).
"""

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter.frontdoor import FilterModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.engine.vllm_engine import (
    NEVER_FORWARDED,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor.frontdoor import (
    FIXED_ROUTES,
    api_routes,
)
from repo_paths import ROOT

ROUTES = FilterModule().filters()["frontdoor_routes"]
DEFAULTS = yaml.safe_load((ROOT / "roles/vllm_frontdoor/defaults/main.yml").read_text())
# vLLM's modules whose routes control the server or show its inside (the route list's third
# column): none of them may ever be forwarded.
CONTROL_MODULES = ("serve.dev.", "rl.online.", "serve.elastic_ep.", "serve.profile.",
                   "serve.fault_tolerance.", "serve.lora.", "scale_out.token_in_token_out.")


def _fixture():
    lines = (ROOT / "tests/fixtures/vllm_routes/vllm-0.32.0-cpu-routes.txt").read_text()
    return [line.split()[:3] for line in lines.splitlines() if line and not line.startswith("#")]


def test_the_roles_default_is_the_openai_routes_and_passes():
    assert ROUTES(DEFAULTS["vllm_frontdoor_api_routes"]) == [
        "/v1/chat/completions", "/v1/completions", "/v1/models"]


def test_routes_clients_may_need_pass():
    extra = ["/v1/embeddings", "/tokenize", "/detokenize", "/v1/responses", "/v1/score",
             "/v1/audio/transcriptions", "/version"]
    assert ROUTES(extra) == extra


CONTROL = tuple("vllm.entrypoints." + m for m in CONTROL_MODULES)


@pytest.mark.parametrize(("method", "path", "module"),
                         [r for r in _fixture() if r[2].startswith(CONTROL)])
def test_every_control_route_of_vllm_is_refused_naming_it(method, path, module):
    with pytest.raises(AnsibleFilterError) as caught:
        ROUTES(["/v1/models", path])
    assert str(caught.value) == (
        f"vllm_frontdoor_api_routes: refused {path} (one of vLLM's control or development "
        "routes, which the front door never forwards)"), (method, module)


def test_the_control_routes_found_are_the_ones_the_issue_names():
    control = {p for _m, p, mod in _fixture() if mod.startswith(CONTROL)}
    assert {"/sleep", "/wake_up", "/is_sleeping", "/collective_rpc", "/pause", "/resume",
            "/update_weights", "/scale_elastic_ep", "/reset_prefix_cache", "/reset_mm_cache",
            "/reset_encoder_cache", "/start_profile", "/stop_profile", "/server_info",
            "/v1/load_lora_adapter", "/v1/unload_lora_adapter"} <= control
    assert len(control) == 33  # each refused: test_every_control_route_of_vllm_is_refused...
    # the instrumentator's inside views and SageMaker's dispatcher are refused too
    assert {"/load", "/kv_event_sources", "/invocations"} <= set(NEVER_FORWARDED)


@pytest.mark.parametrize(("routes", "message"), [
    (["/v1/models/"], "/v1/models/ (wanted a plain path"),
    (["v1/models"], "v1/models (wanted a plain path"),
    (["/v1/../pause"], "/v1/../pause (wanted a plain path"),
    (["//v1/models"], "//v1/models (wanted a plain path"),
    (["/v1/models?x=1"], "/v1/models?x=1 (wanted a plain path"),
    (["/v1/responses/{response_id}"], "/v1/responses/{response_id} (wanted a plain path"),
    (["~ ^/v1/"], "~ ^/v1/ (wanted a plain path"),
    (["/v1/models; deny all"], "/v1/models; deny all (wanted a plain path"),
    ([7], "7 (wanted a plain path"),
    (["/health"], "/health (always served by the front door; leave it out)"),
    (["/metrics/vllm-fleet"], "/metrics/vllm-fleet (always served"),
    (["/fault_tolerance/apply"], "/fault_tolerance/apply (one of vLLM's control"),
    (["/sleep/now"], "/sleep/now (one of vLLM's control"),
    (["/invocations"], "/invocations (one of vLLM's control"),
    (["/v1/models", "/v1/models"], "/v1/models (listed more than once)"),
])
def test_what_is_refused_and_why(routes, message):
    with pytest.raises(ValueError, match=r"^vllm_frontdoor_api_routes: refused ") as caught:
        api_routes(routes)
    assert message in str(caught.value)


def test_a_string_is_not_a_list():
    with pytest.raises(TypeError, match="must be a list") as caught:
        api_routes("/v1/models")
    assert str(caught.value) == ("vllm_frontdoor_api_routes must be a list of paths such as "
                                 "/v1/models, got str '/v1/models'")


def test_every_problem_is_named_at_once():
    with pytest.raises(ValueError, match="refused") as caught:
        api_routes(["/sleep", "/v1/models", "/health"])
    assert str(caught.value) == (
        "vllm_frontdoor_api_routes: refused /sleep (one of vLLM's control or development routes,"
        " which the front door never forwards); /health (always served by the front door;"
        " leave it out)")


def test_the_fixed_routes_are_the_templates_own_locations():
    template = (ROOT / "roles/vllm_frontdoor/templates/vllm-fleet.conf.j2").read_text()
    for route in FIXED_ROUTES:
        assert f"location = {route} {{" in template
