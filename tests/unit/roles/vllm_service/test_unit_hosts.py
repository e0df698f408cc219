# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The model unit on hosts as they really are (issue 34, items 1-3).

- An LXC container given host GPUs 4-7: CUDA numbers them 0-3 (nvidia-smi's index,
  in PCI bus order), while their device files keep the host's minor numbers,
  /dev/nvidia4-7 (the driver's "Device Minor" in
  /proc/driver/nvidia/gpus/<bus>/information). The unit's DeviceAllow= must name
  the files CUDA opens; CUDA_VISIBLE_DEVICES the indices. Fixture:
  tests/fixtures/gpu/synthetic-lxc-host-gpus-4-7 (README.md there), read by the
  gpu_facts module's own fixture seam.
- Compile caches: vLLM (VLLM_CACHE_ROOT, vllm/envs.py), torch inductor
  (TORCHINDUCTOR_CACHE_DIR; unset it is /tmp/torchinductor_<user>,
  torch/_inductor/runtime/cache_dir_utils.py) and Triton (TRITON_CACHE_DIR) load
  what they compile with dlopen; under PrivateTmp= a /tmp cache is lost at every
  start and a noexec /tmp refuses the load. Every unit keeps them under the
  service home, which ReadWritePaths= leaves writable under ProtectSystem=strict.
- InfiniBand/RoCE: NCCL registers (pins) its buffers with the NIC. NCCL's user
  guide, Troubleshooting, "Runtime and MPI issues" > "Memory issues"
  (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/runtime_and_mpi_issues.html)
  asks containers for `--ulimit memlock=-1`; under the default 8 MiB an
  ibv_reg_mr fails "Cannot allocate memory" (NVIDIA/nccl#563, "NCCL Unable to
  register memory"). The unit's verifier refuses any directive the template did
  not write, so the limit is the template's: LimitMEMLOCK=infinity with the IB
  devices when the catalog entry sets rdma: true.
"""

import os
import shutil
import subprocess

import jinja2
import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet.multinode import (
    ReplicaLayoutError,
    replica_node,
    replica_plan,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.gpu_host import (
    collect_from_fixture,
)
from repo_paths import FIXTURES
from systemd_unit import VERIFY_UNIT, parsed, render_unit, tiny_gqa_entry, verify_unit, words

LXC = FIXTURES / "gpu" / "synthetic-lxc-host-gpus-4-7"
LAB = [{"name": "lab1", "ip": "172.31.250.11", "interface": "eth0"},
       {"name": "lab2", "ip": "172.31.250.12", "interface": "eth0"}]
CONTROL = ["/dev/nvidiactl rw", "/dev/nvidia-uvm rw", "/dev/nvidia-uvm-tools rw"]
IB = ["char-infiniband_verbs rw", "/dev/infiniband/rdma_cm rw"]
CACHES = ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def environment(unit):
    return dict(word.split("=", 1) for value in parsed(unit)["Service.Environment"]
                for word in words(value))


def service(unit, key):
    return parsed(unit).get(f"Service.{key}", [])


def verify(unit, tmp_path):
    """The role's verify-unit program on the unit: header check and `systemd-analyze verify`."""
    path = tmp_path / "candidate"
    path.write_text(unit)
    return subprocess.run([str(VERIFY_UNIT), str(path), "vllm-tiny_gqa.service"],
                          capture_output=True, text=True, check=False, timeout=60,
                          env={**os.environ})


def replica_entry(**fields):
    entry = {**tiny_gqa_entry(), "nodes": 2, "gpus": [0], **fields}
    entry["serve"] = {**entry["serve"], "tensor_parallel_size": 2}
    return entry


def replica_units(entry, **overrides):
    plan = replica_plan(entry, LAB, model="tiny_gqa")
    return {host: render_unit(entry, vllm_service_node=replica_node(plan, host), **overrides)
            for host in ("lab1", "lab2")}


# --- 1. a container given host GPUs 4-7 -------------------------------------------

@pytest.fixture(scope="module")
def container_facts():
    return collect_from_fixture(str(LXC))


def test_the_container_fixture_reads_as_four_gpus_with_the_hosts_minors(container_facts):
    gpus = container_facts["gpus"]
    assert [(g["index"], g["minor_number"]) for g in gpus] == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert container_facts["container"] == "lxc"
    # The driver's list is the host's (all 8 GPUs); the 4 whose nodes were passed in
    # are the container's: the other 4 are not "missing".
    assert len(container_facts["driver_gpu_slots"]) == 8
    assert container_facts["expected_gpu_slots"] == [
        "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
    assert container_facts["problems"] == []


def test_the_same_capture_on_a_host_reports_the_gpus_nvidia_smi_lost(tmp_path):
    # Not a container (no container.txt): 8 GPUs in the driver, 4 listed - a real loss.
    for source in LXC.iterdir():
        if source.name not in ("container.txt", "README.md"):
            shutil.copy(source, tmp_path / source.name)
    facts = collect_from_fixture(str(tmp_path))
    assert len(facts["problems"]) == 1
    assert facts["problems"][0].startswith("nvidia-smi lists 4 GPU(s) but 8 NVIDIA GPU(s)")


def test_a_container_unit_allows_exactly_the_device_files_it_has(container_facts, tmp_path):
    unit = render_unit({**tiny_gqa_entry(), "gpus": [0, 1, 2, 3]},
                       vllm_service_gpu_facts=container_facts)
    assert service(unit, "DeviceAllow") == [
        *CONTROL, "/dev/nvidia4 rw", "/dev/nvidia5 rw", "/dev/nvidia6 rw", "/dev/nvidia7 rw"]
    assert environment(unit)["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert environment(unit)["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    # Each node the unit allows is one the container has.
    allowed = [spec.split()[0] for spec in service(unit, "DeviceAllow")]
    assert [node for node in allowed if node not in container_facts["device_nodes"]] == []
    assert verify_unit.compare(unit) == []
    if SYSTEMD_ANALYZE:
        runnable = render_unit({**tiny_gqa_entry(), "gpus": [0, 1, 2, 3]},
                               vllm_service_gpu_facts=container_facts,
                               vllm_service_vllm_bin=shutil.which("true"))
        result = verify(runnable, tmp_path)
        assert (result.returncode, result.stderr) == (0, "")


def test_without_facts_the_minor_is_the_cuda_index():
    unit = render_unit({**tiny_gqa_entry(), "gpus": [0, 3]})
    assert service(unit, "DeviceAllow") == [*CONTROL, "/dev/nvidia0 rw", "/dev/nvidia3 rw"]


def test_a_gpu_the_container_does_not_have_is_refused(container_facts):
    with pytest.raises((jinja2.TemplateError, AnsibleFilterError),
                       match=r"gpus lists CUDA device 4, but this host's GPU facts list CUDA "
                             r"devices 0, 1, 2, 3"):
        render_unit({**tiny_gqa_entry(), "gpus": [3, 4]}, vllm_service_gpu_facts=container_facts)


# --- 2. compile caches under the home, in every unit ------------------------------

def _units(home):
    overrides = {"vllm_service_home": home, "vllm_service_replica_firewall": "none"}
    replica = replica_units(replica_entry(), **overrides)
    return {
        "cpu": render_unit(tiny_gqa_entry(), **overrides),
        "gpu": render_unit({**tiny_gqa_entry(), "gpus": [0, 1]}, **overrides),
        "head": replica["lab1"], "worker": replica["lab2"],
    }


@pytest.mark.parametrize("home", ["/var/lib/vllm", "/srv/vllm home"])
@pytest.mark.parametrize("kind", ["cpu", "gpu", "head", "worker"])
def test_every_unit_keeps_its_compile_caches_under_the_home(kind, home):
    unit = _units(home)[kind]
    assert verify_unit.compare(unit) == []
    env = environment(unit)
    assert {name: env.get(name) for name in CACHES} == {
        "VLLM_CACHE_ROOT": f"{home}/.cache/vllm",
        "TORCHINDUCTOR_CACHE_DIR": f"{home}/.cache/torchinductor",
        "TRITON_CACHE_DIR": f"{home}/.cache/triton"}
    # Writable under ProtectSystem=strict (the home is the first ReadWritePaths= word),
    # and not under the unit's private /tmp, which a restart empties.
    assert words(service(unit, "ReadWritePaths")[0])[0] == home
    assert env["HOME"] == home
    assert service(unit, "ProtectSystem") == ["strict"]
    assert [value for value in env.values() if value.startswith("/tmp")] == []


def test_the_caches_are_the_homes_not_the_models():
    # Keyed by content and versions, shared like a model's ranks share them; VLLM_CACHE_ROOT
    # is where the lab's image bakes vLLM's modelinfos (lab/bake.yml).
    first = environment(render_unit(tiny_gqa_entry()))
    second = environment(render_unit(tiny_gqa_entry(), model="other_model"))
    assert [first[name] for name in CACHES] == [second[name] for name in CACHES]
    assert first["VLLM_CACHE_ROOT"] == "/var/lib/vllm/.cache/vllm"


@pytest.mark.parametrize("name", CACHES)
def test_a_catalog_env_may_not_move_a_cache(name):
    entry = {**tiny_gqa_entry(), "env": {**tiny_gqa_entry()["env"], name: "/tmp/cache"}}
    with pytest.raises((jinja2.TemplateError, AnsibleFilterError),
                       match=f"catalog entry tiny_gqa: env.{name} is set: the product owns it "
                             r"\(the unit keeps compiled kernels under the service home"):
        render_unit(entry)


# --- 3. InfiniBand/RoCE between a replica's hosts ---------------------------------

def test_the_verifier_refuses_a_memlock_limit_added_by_hand():
    # Why the option exists: the limit cannot be added to a rendered unit.
    unit = replica_units(replica_entry())["lab1"]
    assert service(unit, "LimitMEMLOCK") == []
    edited = unit.replace("LimitNOFILE=65536\n", "LimitNOFILE=65536\nLimitMEMLOCK=infinity\n")
    line = edited.splitlines().index("LimitMEMLOCK=infinity") + 1
    assert verify_unit.compare(edited) == [
        (f"directive Service.LimitMEMLOCK (line {line}) is not one the template wrote "
         "(1 more than intended)")]


@pytest.mark.parametrize("host", ["lab1", "lab2"])
def test_an_rdma_replica_locks_memory_and_allows_the_ib_devices(host, tmp_path):
    entry = replica_entry(rdma=True, env={**tiny_gqa_entry()["env"], "NCCL_IB_HCA": "mlx5_0"})
    unit = replica_units(entry, vllm_service_replica_firewall="none")[host]
    assert service(unit, "LimitMEMLOCK") == ["infinity"]
    assert service(unit, "DeviceAllow") == [*CONTROL, "/dev/nvidia0 rw", *IB]
    assert environment(unit)["NCCL_IB_HCA"] == "mlx5_0"
    assert verify_unit.compare(unit) == []
    if SYSTEMD_ANALYZE:
        runnable = replica_units(entry, vllm_service_replica_firewall="none",
                                 vllm_service_vllm_bin=shutil.which("true"))[host]
        result = verify(runnable, tmp_path)
        assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.parametrize("env", [{"NCCL_IB_HCA": "mlx5_0,mlx5_1"}, {"NCCL_IB_HCA": "^mlx5_2"},
                                 {"NCCL_NET": "IB"}, {"NCCL_NET": "ib"}])
def test_a_plan_naming_ib_hcas_without_rdma_is_refused(env):
    entry = replica_entry(env={**tiny_gqa_entry()["env"], **env})
    named = ", ".join(f"{key}={value}" for key, value in env.items())
    with pytest.raises(ReplicaLayoutError) as caught:
        replica_plan(entry, LAB, model="tiny_gqa")
    message = str(caught.value)
    assert message.startswith(f"catalog entry tiny_gqa: env sets {named}, which has NCCL talk "
                              "InfiniBand/RoCE between the replica's hosts, but the entry does "
                              "not set rdma: true;")
    assert "set rdma: true in the catalog entry" in message


@pytest.mark.parametrize("env", [
    {"NCCL_NET": "Socket"}, {"NCCL_IB_HCA": "mlx5_0", "NCCL_IB_DISABLE": "1"}, {}])
def test_a_plan_without_ib_needs_no_rdma(env):
    entry = replica_entry(env={**tiny_gqa_entry()["env"], **env})
    plan = replica_plan(entry, LAB, model="tiny_gqa")
    assert [(m["rdma"], m["device_allow"]) for m in plan["members"]] == [(False, [])] * 2
    assert service(render_unit(entry, vllm_service_node=plan["members"][0]), "LimitMEMLOCK") == []


def test_rdma_must_be_a_boolean():
    with pytest.raises(ReplicaLayoutError, match="catalog entry tiny_gqa: rdma must be true or "
                                                 "false, got 'yes'"):
        replica_plan(replica_entry(rdma="yes"), LAB, model="tiny_gqa")
