# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 33, item 3 ("refuse before the outage"): the deploy's preflight
(roles/vllm_model/tasks/preflight.yml, run by ansible-playbook on this machine with the
role's real tasks) sizes every model it serves on GPUs and refuses, before the download
and before the running model is stopped, what vLLM 0.32 refuses to start.

The GPUs are the role's hardware profile h200_x2_nvlink (2x H200, 143,771 MiB each: this
machine's driver answers nothing, so the preflight plans with the profile, as on a host
before its driver). Configs are real public ones: moonshotai/Kimi-K2.5 (64 attention heads,
shipped in roles/vllm_model/files/model_configs/), and from tests/fixtures/models/
MiniMax-M2.5 (48 heads, 8 KV heads, 62 layers) and nvidia/DeepSeek-V4-Flash-NVFP4 (compressed
sparse attention, which model_fit cannot size), served to the controller's lookup by the
lab Hub (lab/hub_server.py) for entries added through vllm_fleet_catalog_local."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import hub_server
import pytest
import yaml
from repo_paths import FIXTURES, ROOT

MODELS = FIXTURES / "models"
# The host's Python: this virtualenv's base interpreter, without huggingface_hub, as on a
# host before its tools virtualenv (the download phase installs it): the disk plan then
# estimates from model_download_size_bytes and asks the Hub nothing; the config.json
# comes from the controller's lookup (this virtualenv's Python, with huggingface_hub).
HOST_PYTHON = Path(sys.base_prefix) / "bin" / "python3"
PASSED = "PAST THE PREFLIGHT"
TOKEN = "hf_siteTokenNotASecret0123456789"  # noqa: S105 - the lab Hub's test token
PLAY = f"""
- name: Run the role's preflight, then say so
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Run the role's preflight
      ansible.builtin.import_role:
        name: vllm_fleet.fleet.vllm_model
        tasks_from: preflight.yml
    - name: Say the preflight let the model through
      ansible.builtin.debug:
        msg: {PASSED}
"""
ROLE_PLAY = """
- name: The role as site.yml runs it
  hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: vllm_fleet.fleet.vllm_model
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The lab Hub serving two site repos: MiniMax-M2.5's and DeepSeek-V4-Flash's config."""
    root = tmp_path_factory.mktemp("preflight-hub")
    for repo, name in (("site/minimax-copy", "MiniMaxAI--MiniMax-M2.5.config.json"),
                       ("site/deepseek-v4-flash", "nvidia--DeepSeek-V4-Flash-NVFP4.config.json")):
        (root / repo).mkdir(parents=True)
        (root / repo / "config.json").write_text((MODELS / name).read_text())
    # A gated copy: the lab Hub answers 401 without this token, 403 with another one.
    (root / "site/gated-minimax").mkdir(parents=True)
    (root / "site/gated-minimax/config.json").write_text(
        (MODELS / "MiniMaxAI--MiniMax-M2.5.config.json").read_text())
    (root / "site/gated-minimax/.gated").write_text(TOKEN)
    server, url = hub_server.start_in_thread(root)
    yield url
    server.shutdown()
    server.server_close()


def test_the_host_python_has_no_huggingface_hub():
    proc = subprocess.run([str(HOST_PYTHON), "-c", "import huggingface_hub"],
                          capture_output=True, text=True, check=False, timeout=60)
    assert "No module named 'huggingface_hub'" in proc.stderr


def site_entry(repo_id, **serve):
    """A whole new catalog entry, as a site adds one (no copy of its config ships)."""
    return {"description": "a site's model", "repo_id": repo_id, "revision": "main",
            "size_bytes": 230_000_000_000, "served_model_name": repo_id.split("/")[1],
            "port": 8190, "gpus": [0, 1], "startup_timeout_s": 1800,
            "vllm": {"variant": "cuda", "version": "0.32.0"},
            "serve": {"tensor_parallel_size": 2, "enable_expert_parallel": True, **serve},
            "extra_args": [], "env": {}}


def preflight(tmp_path, hub_url, extra, play=PLAY, args=()):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "play.yml").write_text(play)
    variables = tmp_path / "vars.json"
    variables.write_text(json.dumps({
        "vllm_fleet_gpu": True, "vllm_fleet_hardware_profile": "h200_x2_nvlink",
        "vllm_fleet_hf_endpoint": hub_url, "vllm_fleet_frontdoor": False,
        "vllm_fleet_models_root": str(tmp_path / "models"),
        "vllm_fleet_model_links_dir": str(tmp_path / "links"),
        "model_download_tools_venv": str(tmp_path / "no-tools-venv"),
        "model_download_hf_home": str(tmp_path / "host-hf"),
        # The disk check is not under test: its estimate is the entry's size_bytes.
        "model_download_size_bytes": 1000, "model_download_margin_bytes": 0, **extra}))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               HF_HOME=str(tmp_path / "controller-hf"), HF_HUB_DISABLE_TELEMETRY="1")
    env.pop("HF_ENDPOINT", None)
    env.pop("HF_TOKEN", None)
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-e",
         f"ansible_python_interpreter={HOST_PYTHON}", "-e", f"@{variables}", *args,
         str(tmp_path / "play.yml")],
        capture_output=True, text=True, env=env, check=False, timeout=300)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


def refused(rc, out, *lines):
    assert rc == 2, out[-4000:]
    assert "cannot host" in out, out[-4000:]
    for line in lines:
        assert line in out, out[-4000:]
    assert PASSED not in out


def test_tp3_on_the_64_heads_of_kimi_k25_is_refused(tmp_path, hub):
    """The shipped config.json of moonshotai/Kimi-K2.5: 64 attention heads; vLLM's
    QKV/attention sharding needs tensor parallel to divide them (the issue's case)."""
    rc, out = preflight(tmp_path, hub, {
        "model": "kimi_k25_int4", "vllm_fleet_hardware_profile": "h200_x8_nvlink",
        "vllm_fleet_catalog_local": {"kimi_k25_int4": {
            "gpus": [0, 1, 2], "serve": {"tensor_parallel_size": 3}}}})
    # (its 595 GB over 3 GPUs leave no KV cache either: that refusal comes after, in vLLM's
    # order)
    refused(rc, out, "localhost cannot host kimi_k25_int4:",
            "vLLM refuses to start it: tensor parallel: tensor_parallel_size 3 does not divide "
            "num_attention_heads 64; KV cache: max_model_len 131072: no memory is left for the "
            "KV cache")


def test_a_site_entry_is_sized_from_its_fetched_config_and_refused_by_its_kv_cache(
        tmp_path, hub):
    """site/minimax-copy: no copy ships; the controller reads its config.json from the lab
    Hub. On 2 H200s at TP2 the 230 GB weights leave too little for one 196,608-token
    request (8 KV heads / 2 = 4 per GPU x 128 x 2 x 2 B x 62 layers = 126,976 B a token):
    vLLM's own start-up check (vllm/v1/core/kv_cache_utils.py) would refuse it."""
    rc, out = preflight(tmp_path, hub, {
        "model": "site_minimax",
        "vllm_fleet_catalog_local": {"site_minimax": site_entry(
            "site/minimax-copy", max_model_len=196_608, gpu_memory_utilization=0.92)}})
    refused(rc, out, "localhost cannot host site_minimax:",
            "vLLM refuses to start it: KV cache: max_model_len 196608 against the KV cache for "
            "one request: \"To serve at least one request with the model's max seq len (196608), "
            "23.25 GiB KV cache is needed, which is larger than the available KV cache memory",
            "Based on the available memory, the estimated maximum model length is")


def test_a_site_entry_that_fits_by_its_fetched_config_passes(tmp_path, hub):
    """The same fetched config at max_model_len 65,536 (7.75 GiB per GPU): it fits."""
    rc, out = preflight(tmp_path, hub, {
        "model": "site_minimax",
        "vllm_fleet_catalog_local": {"site_minimax": site_entry(
            "site/minimax-copy", max_model_len=65_536, gpu_memory_utilization=0.92)}})
    assert rc == 0, out[-4000:]
    assert PASSED in out
    assert "cannot host" not in out


@pytest.mark.parametrize(("repo", "why"), [
    ("site/deepseek-v4-flash",
     ("cannot size site/deepseek-v4-flash at revision main: cannot size this architecture: "
      "DeepseekV4ForCausalLM has DeepSeek-V4 compressed sparse attention")),
    ("site/not-on-the-hub",
     ("cannot size site/not-on-the-hub at revision main: config.json of site/not-on-the-hub at "
      "revision main could not be read from http://127.0.0.1:")),
])
def test_a_model_that_cannot_be_sized_is_refused_unless_allowed(tmp_path, hub, repo, why):
    extra = {"model": "site_model",
             "vllm_fleet_catalog_local": {"site_model": site_entry(repo, max_model_len=8192)}}
    rc, out = preflight(tmp_path / "strict", hub, extra)
    refused(rc, out, "localhost cannot host site_model:", why,
            "set vllm_fleet_allow_unsized: true to deploy it unsized")
    rc, out = preflight(tmp_path / "allowed", hub, dict(extra, vllm_fleet_allow_unsized=True))
    assert rc == 0, out[-4000:]
    assert PASSED in out
    assert "site_model is NOT SIZED (" + why in out
    assert "deployed anyway because vllm_fleet_allow_unsized is true" in out


def test_a_gated_site_model_is_read_with_the_deploys_token(tmp_path, hub):
    """The controller reads config.json with model_download_token, the token the host's
    download uses; the token shows in no output."""
    extra = {"model": "site_gated", "vllm_fleet_catalog_local": {"site_gated": site_entry(
        "site/gated-minimax", max_model_len=65_536, gpu_memory_utilization=0.92)}}
    rc, out = preflight(tmp_path / "without", hub, extra)
    refused(rc, out, "cannot size site/gated-minimax at revision main: config.json of "
            "site/gated-minimax at revision main could not be read from http://127.0.0.1:",
            "GatedRepoError: 401 Client Error")
    rc, out = preflight(tmp_path / "with", hub, dict(extra, model_download_token=TOKEN),
                        args=("-v",))
    assert rc == 0, out[-4000:]
    assert PASSED in out
    assert TOKEN not in out


STAGE_PLAY = """
- name: Pre-stage as a fleet's roll does before its preflight
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Download and verify the model
      ansible.builtin.import_role:
        name: vllm_fleet.fleet.vllm_model
        tasks_from: stage.yml
"""


def test_a_fleets_pre_stage_sizes_before_it_downloads(tmp_path, hub):
    """playbooks/deploy.yml pre-stages (stage.yml, the download alone) on every host before
    its roll runs each host's preflight: the fit refuses there first, nothing downloaded."""
    rc, out = preflight(tmp_path, hub, {
        "model": "site_minimax",
        "vllm_fleet_catalog_local": {"site_minimax": site_entry(
            "site/minimax-copy", max_model_len=196_608, gpu_memory_utilization=0.92)}},
        play=STAGE_PLAY)
    assert rc == 2, out[-4000:]
    assert ("localhost does not stage site_minimax: vLLM refuses to start it: KV cache: "
            "max_model_len 196608 against the KV cache for one request") in out
    assert "Start the download on the host" not in out
    assert not (tmp_path / "models").exists()


def test_check_mode_reports_the_refusal_and_goes_on(tmp_path, hub):
    """--check: the preflight's problems are reported (PREFLIGHT would fail) and the plan
    goes on, the fetched config sized all the same."""
    rc, out = preflight(tmp_path, hub, {
        "model": "site_minimax",
        "vllm_fleet_catalog_local": {"site_minimax": site_entry(
            "site/minimax-copy", max_model_len=196_608, gpu_memory_utilization=0.92)}},
        args=("--check",))
    assert rc == 0, out[-4000:]
    assert "PREFLIGHT would fail: localhost cannot host site_minimax:" in out
    assert "max_model_len 196608 against the KV cache for one request" in out
    assert PASSED in out


@pytest.fixture(scope="module")
def role_tasks(tmp_path_factory):
    """The role's task list in the order it runs (ansible-playbook --list-tasks)."""
    tmp = tmp_path_factory.mktemp("list")
    (tmp / "play.yml").write_text(ROLE_PLAY)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp / "tmp"))
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,",
         "--list-tasks", str(tmp / "play.yml")],
        capture_output=True, text=True, env=env, check=True, timeout=120)
    return [line.strip().split("\t")[0] for line in proc.stdout.splitlines()
            if line.startswith("      ")]


def test_the_sizing_and_its_refusal_come_before_the_download_and_any_stop(role_tasks):
    def at(name):
        matches = [i for i, task in enumerate(role_tasks) if task.endswith(name)]
        assert matches, f"{name!r} not in {role_tasks}"
        return matches[0]
    fetch = at("vllm_model : Read the model's config.json (the shipped copy, else the Hub "
               "from the controller)")
    fit = at("vllm_model : Work out whether the model fits the GPUs (config.json, no weights)")
    refuse = at("vllm_model : Refuse a model the host cannot serve")
    assert fetch < fit < refuse
    # Nothing on the host changes before the refusal: the driver, the download (and the
    # tools virtualenv it installs), the unit, the switch that stops the running model.
    assert refuse < at("Install the NVIDIA driver")
    assert refuse < at("model_download : Create the tools virtualenv with huggingface_hub")
    # (the download job is included per host: the stager of a shared volume first)
    assert refuse < at("model_download : Download on this host (the stager of its volume, "
                       "or a host of its own)")
    assert refuse < at("vllm_model : Start the switch on the host (health gate, rollback on "
                       "failure)")
    assert refuse < at("vllm_model : Stop blue on every host of the switch (front door 503, "
                       "drain, stop)")


def plan(tmp_path, hub_url, extra, models):
    tmp_path.mkdir(exist_ok=True)
    variables = tmp_path / "vars.json"
    variables.write_text(json.dumps({"vllm_fleet_hf_endpoint": hub_url, **extra}))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               HF_HOME=str(tmp_path / "controller-hf"), HF_HUB_DISABLE_TELEMETRY="1")
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-e",
         f"ansible_python_interpreter={sys.executable}", "-e", f"@{variables}",
         "-e", f"models={models}", "-e", "hardware=h200_x2_nvlink",
         str(ROOT / "playbooks" / "plan.yml")],
        capture_output=True, text=True, env=env, check=False, timeout=300)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


def test_the_plan_sizes_a_site_entry_through_the_same_lookup(tmp_path, hub):
    rc, out = plan(tmp_path, hub, {"vllm_fleet_catalog_local": {"site_minimax": site_entry(
        "site/minimax-copy", max_model_len=196_608, gpu_memory_utilization=0.92)}},
        "site_minimax,minimax_m25")
    assert rc == 0, out[-4000:]
    # One bullet per refusal, under the model's name; the cell's number explained.
    assert ("site_minimax: vLLM refuses to start it: site_minimax: - KV cache: max_model_len "
            "196608 against the KV cache") in out
    assert "DOES NOT FIT (-" in out
    assert ("(negative: that much short of one max-length request)") in out


def test_the_plan_shows_a_model_it_cannot_size_and_goes_on(tmp_path, hub):
    """Issue 33 (a new user's findings): a site entry whose config.json cannot be read
    (not on the lab Hub: the lookup reports the Hub's 404) used to stop the plan with no
    table; it gets an UNSIZED column with the reason, the other model is still sized, and
    the finding names both ways out (docs/operations.md: prefill the controller's cache
    and HF_HUB_OFFLINE=1; vllm_fleet_allow_unsized for the deploy)."""
    rc, out = plan(tmp_path, hub, {"vllm_fleet_catalog_local": {"site_model": site_entry(
        "site/not-on-the-hub", max_model_len=8192)}}, "minimax_m25,site_model")
    assert rc == 0, out[-4000:]
    assert "site_model: UNSIZED: cannot size site/not-on-the-hub at revision main: config.json" \
        in out
    assert "HF_HUB_OFFLINE=1" in out
    assert "vllm_fleet_allow_unsized: true" in out
    # The other model is still sized (MiniMax's TP8 on the profile's 2 GPUs), and its
    # column stands beside the UNSIZED one.
    assert "minimax_m25: does not fit: needs 8 GPUs, has 2" in out, out[-6000:]
    assert "| DOES NOT FIT (needs 8 GPUs) | UNSIZED" in out


def test_the_plan_refuses_what_the_deploys_request_check_refuses(tmp_path, hub):
    """A catalog entry that sets what the product owns (request.yml's vllm_request_check):
    the deploy refuses it before any download, so the plan no longer shows it as fitting."""
    rc, out = plan(tmp_path, hub, {"vllm_fleet_catalog_local": {"minimax_m25": {
        "extra_args": ["--host", "0.0.0.0"]}}}, "minimax_m25")  # noqa: S104 - the hostile value
    assert rc == 2, out[-4000:]
    assert ("catalog entry minimax_m25: extra_args[0] holds '--host', which vLLM reads as "
            "--host: the product owns it") in out
    assert "Show the candidates side by side" not in out


def test_the_entrys_env_reaches_the_fit(tmp_path, hub):
    """fit.yml passes the entry's env: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 there lets
    max_model_len 262,144 past MiniMax-M2.5's max_position_embeddings 196,608 with vLLM's
    warning (vllm/config/model.py), where without it the plan shows the refusal."""
    long_len = {"serve": {"max_model_len": 262_144}}
    rc, out = plan(tmp_path / "refused", hub, {"vllm_fleet_catalog_local": {
        "minimax_m25": long_len}}, "minimax_m25")
    assert rc == 0, out[-4000:]
    assert ("minimax_m25: - max_model_len: 262144 exceeds max_position_embeddings 196608 (to "
            "allow it, set env VLLM_ALLOW_LONG_MAX_MODEL_LEN") in out, out[-4000:]
    rc, out = plan(tmp_path / "allowed", hub, {"vllm_fleet_catalog_local": {"minimax_m25": dict(
        long_len, env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})}}, "minimax_m25")
    assert rc == 0, out[-4000:]
    assert ("minimax_m25: WARNING max_model_len 262144 exceeds max_position_embeddings 196608, "
            "allowed by the entry's env VLLM_ALLOW_LONG_MAX_MODEL_LEN=1") in out, out[-4000:]
    assert "max_model_len: 262144 exceeds" not in out


OFFLINE = "http://127.0.0.1:9"  # a closed loopback port: every Hub request is refused


@pytest.mark.parametrize("check", [True, False])
def test_an_offline_hub_is_one_finding_of_the_report(tmp_path, check):
    """Issue 33 (a new user's preflight offline): with the host's tools virtualenv present
    (this virtualenv: huggingface_hub), the disk check asks the Hub for the file list; the
    Hub does not answer. That is one line of the "cannot host" report, beside the sizing's
    own (config.json unreadable: set vllm_fleet_allow_unsized), worded as a network error
    (no "HTTP None", no "at the Hub" twice) with its bounded retries and their time. In
    check mode the plan goes on; outside it the report fails before anything changes."""
    rc, out = preflight(tmp_path, OFFLINE, {
        "model": "site_model", "model_download_tools_venv": sys.prefix,
        "model_download_retries": 1,
        "vllm_fleet_catalog_local": {
            "site_model": site_entry("Qwen/Qwen3-8B", max_model_len=8192)}},
        args=("--check",) if check else ())
    assert "HTTP None" not in out, out[-4000:]
    assert "at the Hub failed" not in out, out[-4000:]
    head = "PREFLIGHT would fail: localhost cannot host site_model:" if check else \
        "localhost cannot host site_model:"
    assert head in out, out[-4000:]
    assert ("cannot check the disk (what is still to download): Hub request for Qwen/Qwen3-8B@main "
            f"at {OFFLINE} failed with no HTTP answer (network error):") in out, out[-4000:]
    assert "nothing on disk was trusted (1 retry, " in out, out[-4000:]
    assert ("cannot size Qwen/Qwen3-8B at revision main: config.json of Qwen/Qwen3-8B at revision "
            f"main could not be read from {OFFLINE}") in out, out[-4000:]
    assert "set vllm_fleet_allow_unsized: true to deploy it unsized" in out
    if check:
        assert rc == 0, out[-4000:]
        assert PASSED in out
    else:
        refused(rc, out)


WARM_PLAY = PLAY.replace("        msg: " + PASSED, """        msg: "{{ {
                   'share': vllm_service_entry.serve.gpu_memory_utilization,
                   'mode': __vllm_model_cutover_params.switch_mode | trim,
                   'level': __vllm_model_cutover_params.sleep_level | trim,
                   'sizing': __vllm_model_warm.warm_plan.sizing} | to_json }}"
""")


CATALOG = yaml.safe_load((ROOT / "roles/vllm_model/defaults/main/catalog.yml").read_text())[
    "vllm_fleet_catalog"]


def _record(path, active):
    path.write_text(json.dumps({"active": active, "previous": None, "history": []}))


def _warm_answer(out):
    found = re.search(r"msg: '(\{.*?\})'", out)
    assert found, out[-4000:]
    return json.loads(found.group(1))


def test_the_preflight_decides_the_warm_switch_on_this_host(tmp_path, hub):
    """Issue 35 item 2 on a host: the role's preflight reads the deployment record and this
    machine's /proc/meminfo (a few GiB: below the 32 GiB reserve, so MiniMax-M2.5's 215 GiB
    of weights cannot be pinned) and plans the switch minimax_m25 -> kimi_k25_int4 on
    rtx_pro_6000_x8_pcie: level 1 does not fit, and level 2 is not known to work for a blue
    whose record names no architecture (issue 43: MiniMax-M2's level-2 wake killed the
    engine on a GPU), so MiniMax stops and Kimi's unit gets the catalog's 0.92. With Kimi
    active, a re-run keeps its unit's share."""
    record = tmp_path / "vllm_fleet.fact"
    minimax = {"model": "minimax_m25", "unit": "vllm-minimax_m25.service",
               "gpus": list(range(8)), "revision": "x" * 40, "sleep_mode": True,
               "sizing": {"weights_bytes_per_gpu": 28_780_000_000, "gpus_needed": 8,
                          "tensor_parallel_size": 8, "gpu_memory_utilization": 0.92,
                          "catalog_gpu_memory_utilization": 0.92}}
    _record(record, minimax)
    extra = {"vllm_model_name": "kimi_k25_int4", "vllm_fleet_switch_mode": "warm",
             "vllm_fleet_hardware_profile": "rtx_pro_6000_x8_pcie",
             "__vllm_model_record_file": str(record)}
    rc, out = preflight(tmp_path / "switch", hub, extra, play=WARM_PLAY)
    assert rc == 0, out[-4000:]
    answer = _warm_answer(out)
    # Issue 43's GPU run: no level 2 for a blue whose level-2 wake is not shown working; this
    # record (written before the sizing kept the architecture) cannot say, so MiniMax stops
    # and Kimi starts at the catalog's whole share.
    assert answer["share"] == 0.92
    assert "minimax_m25 -> kimi_k25_int4: COLD" in out
    assert "its architecture is not in the deployment record" in out
    # this machine's MemAvailable, less the 32 GiB reserve: nothing left to pin (the YAML
    # output doubles the quote of "minimax_m25's")
    assert re.search(r"host RAM short by 428\.86 GiB for level 1 \(minimax_m25'+s pinned "
                     r"weights 428\.86 GiB, 0\.00 GiB free: host RAM [\d.]+ GiB less the "
                     r"32\.00 GiB reserve\)\); level 2: its architecture is not in the "
                     r"deployment record", out), out[-4000:]
    assert answer["sizing"]["gpu_memory_utilization"] == 0.92
    assert answer["sizing"]["catalog_gpu_memory_utilization"] == 0.92
    assert answer["sizing"]["architecture"] == "DeepseekV3ForCausalLM"  # kept from now on
    kimi = {"model": "kimi_k25_int4", "unit": "vllm-kimi_k25_int4.service",
            "gpus": list(range(8)), "revision": CATALOG["kimi_k25_int4"]["revision"],
            "sleep_mode": True, "sizing": answer["sizing"]}
    _record(record, kimi)
    rc, out = preflight(tmp_path / "rerun", hub, dict(extra), play=WARM_PLAY)
    assert rc == 0, out[-4000:]
    rerun = _warm_answer(out)
    assert rerun["share"] == 0.92
    assert rerun["sizing"] == answer["sizing"]  # the record's active entry is unchanged
    assert "kimi_k25_int4 -> " not in out  # no switch, no plan shown
