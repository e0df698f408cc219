# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""gpu_facts.collect and runtime_problems on real captures and hand-made edge cases: lost
GPUs, driver/userspace skew, device nodes, CUDA initialisation (tests/fixtures/gpu/*/SOURCE.md)."""

import json

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_facts as gf
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_readers as rd
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import nvidia_smi as smi
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.gpu_host import (
    collect_from_fixture,
)
from repo_paths import FIXTURES

GPU = FIXTURES / "gpu"
H200 = FIXTURES / "gpu" / "h200x2-nvlink"
SYNTH = FIXTURES / "gpu" / "synthetic-rtxpro6000x8-pcie"
MIB = 1024 * 1024
P2P = GPU / "h200x2-nvlink-p2p"
PUBLIC = GPU / "public"


def _read(path):
    return path.read_text()


def _copy(src, dst, skip=()):
    for item in src.iterdir():
        if item.name not in skip:
            (dst / item.name).write_text(item.read_text())
    return dst


# --- case 4: a loaded driver and a lost GPU is a hard failure naming the bus id ---


def _synth_proc():
    return _read(SYNTH / "proc-driver-nvidia-version.txt")


def test_h200_collect_from_real_capture():
    facts = collect_from_fixture(str(H200))
    assert facts["present"] is True
    assert facts["gpu_count"] == 2
    assert facts["driver_version"] == "580.159.04"
    assert facts["cuda_version"] == "13.0"
    assert facts["kernel_module"]["flavour"] == "open"
    assert [g["name"] for g in facts["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert [g["compute_capability"] for g in facts["gpus"]] == ["9.0", "9.0"]
    assert [g["memory_total_bytes"] for g in facts["gpus"]] == [143771 * MIB] * 2
    assert all(g["persistence_mode"] is True for g in facts["gpus"])
    assert "driver_version" not in facts["gpus"][0]
    assert facts["topology"]["gpu_pairs"]["GPU0-GPU1"] == "NV18"
    assert facts["processes"] == []  # no compute-apps capture: falls back to the XML, empty
    assert facts["pci_gpu_count"] is None  # no lspci capture
    assert facts["problems"] == []


def test_synthetic_collect_processes_and_pci_count():
    facts = collect_from_fixture(str(SYNTH))
    assert facts["gpu_count"] == 8
    assert facts["pci_gpu_count"] == 8  # the 0403 audio function is not counted
    assert {g["compute_capability"] for g in facts["gpus"]} == {"12.0"}
    assert facts["cuda_version"] is None  # no XML in this fixture
    assert facts["driver_version"] == "580.95.05"  # from the query CSV
    assert facts["processes"] == [
        {
            "pid": 4242,
            "used_memory_bytes": 1024 * MIB,
            "gpu_uuid": "GPU-5e7a0e00-0000-4000-8000-000000000003",
            "gpu_index": 3,
        }
    ]


def test_collect_without_nvidia_smi_returns_zero_gpus():
    def must_not_run(argv):
        raise AssertionError(argv)

    facts = gf.collect(must_not_run, nvidia_smi=None, lspci_text="01:00.0 0302: 10de:2bb5\n")
    assert facts["present"] is False
    assert facts["gpu_count"] == 0
    assert "nvidia-smi not found" in facts["msg"]
    assert facts["pci_gpu_count"] == 1


def test_collect_when_nvidia_smi_finds_no_devices():
    calls = []

    def run(argv):
        calls.append(argv)
        return 6, "No devices were found\n", ""

    proc = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Release Build\n"
    facts = gf.collect(run, nvidia_smi="/usr/bin/nvidia-smi", proc_version_text=proc)
    assert len(calls) == 1
    assert facts["gpu_count"] == 0
    assert facts["nvidia_smi_rc"] == 6
    assert facts["msg"] == "nvidia-smi failed (rc=6): No devices were found"
    assert facts["kernel_module"]["flavour"] == "proprietary"


def test_collect_calls_documented_commands():
    calls = []

    def run(argv):
        calls.append(argv)
        return 1, "", "unsupported"

    # query-gpu answers, everything else fails: facts still come back.
    def run_first_ok(argv):
        if argv[1].startswith("--query-gpu="):
            calls.append(argv)
            return (
                0,
                "0, NVIDIA H200, GPU-a, 00000000:00:06.0, 10, 1, 9, 9.0, Disabled, 580.1\n",
                "",
            )
        return run(argv)

    facts = gf.collect(run_first_ok, nvidia_smi="nvidia-smi")
    assert calls[0] == [
        "nvidia-smi",
        (
            "--query-gpu=index,name,uuid,pci.bus_id,memory.total,memory.used,memory.free,"
            "compute_cap,persistence_mode,driver_version"
        ),
        "--format=csv,noheader,nounits",
    ]
    assert ["nvidia-smi", "-q", "-x"] in calls
    assert ["nvidia-smi", "topo", "-m"] in calls
    assert facts["gpus"][0]["persistence_mode"] is False
    assert facts["gpus"][0]["memory_total_bytes"] == 10 * MIB
    assert facts["topology"] is None
    assert facts["driver_version"] == "580.1"


def test_pci_listing_formats_and_what_is_refused(tmp_path):
    # lspci -n (synthetic fixture), lspci -nn (line from club-3090#688), sysfs layout (real).
    assert len(rd.parse_lspci_n(_read(SYNTH / "lspci-n.txt"))) == 8
    nn = (
        "01:00.0 VGA compatible controller [0300]: NVIDIA Corporation GA102 [GeForce RTX 3090] "
        "[10de:2204] (rev a1)\n"
    )
    assert rd.parse_lspci_n(nn) == ["0000:01:00.0"]
    # The shared capture's bare slot list cannot tell GPUs from other devices.
    with pytest.raises(smi.GpuFactsError, match="unrecognised line in the PCI device listing"):
        rd.parse_lspci_n(_read(P2P / "sysfs-pci-slots.txt"))
    # An lspci -vvv dump (support bundles carry it) reads too: bridges only here, no GPU.
    assert rd.parse_lspci_n(_read(PUBLIC / "lspci-vvv-pex890xx-nonroot.txt")) == []
    # A listing that is none of these is still refused, through the seam too.
    _copy(P2P, tmp_path)
    (tmp_path / "lspci-n.txt").write_text("ad:00.0\n")
    with pytest.raises(smi.GpuFactsError, match="unrecognised line in the PCI device listing"):
        collect_from_fixture(str(tmp_path))


def test_nvidia_smi_failing_with_a_lost_gpu_names_it_and_never_falls_back():
    lost_line = _read(PUBLIC / "nvidia-smi-lost-gpu-nvct69.txt")  # GPU0000:65:00.0

    def run(argv):
        return 15, lost_line, ""

    pci = "0000:65:00.0 0302: 10de:2bb5 (rev a1)\n0000:66:00.0 0302: 10de:2bb5 (rev a1)\n"
    facts = gf.collect(
        run, nvidia_smi="nvidia-smi", proc_version_text=_synth_proc(), lspci_text=pci
    )
    assert facts["present"] is False
    assert facts["driver_loaded"] is True
    assert facts["lost_gpus"] == [{"bus_id": "0000:65:00.0", "error": "Unknown Error"}]
    (problem,) = facts["problems"]
    assert problem.startswith(
        "the NVIDIA kernel module 580.95.05 is loaded but nvidia-smi failed (rc=15): "
    )
    assert "GPUs nvidia-smi cannot open: 0000:65:00.0 (Unknown Error)" in problem
    assert "NVIDIA GPUs on the PCI bus that nvidia-smi does not list: 0000:66:00.0" in problem


def test_exit_zero_with_a_lost_gpu_line_among_the_rows_names_the_gpu():
    # Synthetic 8x rows with GPU 3's row replaced by the real error line of
    # open-gpu-kernel-modules#387 moved to its bus id: no field-count error.
    rows = [
        ln for ln in _read(SYNTH / "nvidia-smi-query-gpu.csv").splitlines() if "5d:00.0" not in ln
    ]
    rows.append("Unable to determine the device handle for GPU 0000:5D:00.0: Unknown Error")
    text = "\n".join(rows) + "\n"

    def run(argv):
        if argv[1].startswith("--query-gpu="):
            return 0, text, ""
        return 1, "", "not captured"

    facts = gf.collect(
        run,
        nvidia_smi="nvidia-smi",
        proc_version_text=_synth_proc(),
        lspci_text=_read(SYNTH / "lspci-n.txt"),
    )
    assert facts["gpu_count"] == 7
    assert facts["lost_gpus"] == [{"bus_id": "0000:5d:00.0", "error": "Unknown Error"}]
    (problem,) = facts["problems"]
    assert problem.startswith(
        "nvidia-smi lists 7 GPU(s) but 8 NVIDIA GPU(s) are on the PCI bus and in the driver; "
        "it cannot open 0000:5d:00.0 (Unknown Error)"
    )


def test_fewer_gpus_than_the_pci_bus_without_an_error_line(tmp_path):
    _copy(SYNTH, tmp_path)
    rows = [
        ln for ln in _read(SYNTH / "nvidia-smi-query-gpu.csv").splitlines() if "db:00.0" not in ln
    ]
    (tmp_path / "nvidia-smi-query-gpu.csv").write_text("\n".join(rows) + "\n")
    facts = collect_from_fixture(str(tmp_path))
    assert facts["gpu_count"] == 7
    assert facts["expected_gpu_slots"][-1] == "0000:db:00.0"
    (problem,) = facts["problems"]
    assert "missing: 0000:db:00.0" in problem
    # An LXC container given GPUs 0-6 only says so, and then nothing is missing.
    given = [f"0000:{s}:00.0" for s in ("18", "2a", "3a", "5d", "9a", "ab", "ba")]
    assert collect_from_fixture(str(tmp_path), expected_bus_ids=given)["problems"] == []


def test_blackwell_on_the_proprietary_module_says_no_devices_and_names_every_gpu():
    def run(argv):
        return 6, "No devices were found\n", ""

    facts = gf.collect(
        run,
        nvidia_smi="nvidia-smi",
        proc_version_text=(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Release Build\n"
        ),
        lspci_text=_read(SYNTH / "lspci-n.txt"),
    )
    (problem,) = facts["problems"]
    assert "nvidia-smi failed (rc=6): No devices were found" in problem
    assert problem.endswith(
        "0000:18:00.0, 0000:2a:00.0, 0000:3a:00.0, 0000:5d:00.0, 0000:9a:00.0, 0000:ab:00.0, "
        "0000:ba:00.0, 0000:db:00.0"
    )
    assert facts["kernel_module"]["flavour"] == "proprietary"


def test_no_driver_loaded_and_nvidia_smi_failing_is_not_a_problem_yet():
    # A host before its first reboot into the driver: facts say so, nothing to repair here.
    def run(argv):
        return (
            9,
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
            "",
        )

    facts = gf.collect(run, nvidia_smi="nvidia-smi", lspci_text=_read(SYNTH / "lspci-n.txt"))
    assert facts["problems"] == []
    assert facts["driver_loaded"] is False
    assert facts["pci_gpu_count"] == 8


# --- case 2: userspace of another version than the module ---


def test_userspace_module_mismatch_names_both_versions_and_the_fix():
    def run(argv):
        return 18, _read(PUBLIC / "nvidia-smi-mismatch-tinygrad47.txt"), ""

    facts = gf.collect(
        run,
        nvidia_smi="nvidia-smi",
        proc_version_text=_synth_proc(),
        lspci_text=_read(SYNTH / "lspci-n.txt"),
    )
    (problem,) = facts["problems"]
    assert (
        "The userspace driver (NVML 570.124) does not match the kernel module 580.95.05" in problem
    )
    assert "install the userspace of exactly 580.95.05" in problem
    assert "nvidia-smi reaches none of the NVIDIA GPUs on the PCI bus: 0000:18:00.0, " in problem
    assert facts["nvidia_smi_rc"] == 18


def test_nvidia_smi_reporting_another_driver_than_the_module_is_a_problem(tmp_path):
    _copy(SYNTH, tmp_path)
    (tmp_path / "proc-driver-nvidia-version.txt").write_text(
        _synth_proc().replace("580.95.05", "580.82.07")
    )
    facts = collect_from_fixture(str(tmp_path))
    assert facts["problems"] == [
        (
            "nvidia-smi reports driver 580.95.05 but the loaded kernel module is 580.82.07: "
            "install the userspace of exactly 580.82.07"
        )
    ]


# --- case 3: device nodes, nvidia-uvm, CUDA initialisation ---


def test_real_device_nodes_and_minors():
    nodes = rd.parse_device_nodes(_read(P2P / "dev-nvidia.txt"))
    assert nodes["/dev/nvidia0"] == "195:0"
    assert nodes["/dev/nvidiactl"] == "195:255"
    assert nodes["/dev/nvidia-uvm"] == "238:0"
    assert nodes["/dev/nvidia-uvm-tools"] == "238:1"
    assert nodes["/dev/nvidia-caps/nvidia-cap2"] == "241:2"
    facts = collect_from_fixture(str(P2P))
    assert gf.gpu_minors(facts) == {0: 0, 1: 1}
    assert facts["problems"] == []


def test_container_without_nvidia_uvm_names_the_lxc_and_host_fix(tmp_path):
    _copy(P2P, tmp_path)
    lines = [ln for ln in _read(P2P / "dev-nvidia.txt").splitlines() if "uvm" not in ln]
    (tmp_path / "dev-nvidia.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "container.txt").write_text("lxc\n")
    facts = collect_from_fixture(str(tmp_path))
    assert facts["container"] == "lxc"
    (problem,) = facts["problems"]
    assert problem.startswith(
        "device nodes missing: /dev/nvidia-uvm, /dev/nvidia-uvm-tools (CUDA cannot initialise "
        "without nvidia-uvm); fix on the host, load nvidia-uvm"
    )
    assert "lxc.cgroup2.devices.allow: c 195:* rwm" in problem
    assert "lxc.mount.entry: /dev/<node> dev/<node> none bind,optional,create=file" in problem
    # On a host (no container) and no CUDA check, missing uvm nodes are normal until first use.
    (tmp_path / "container.txt").unlink()
    assert collect_from_fixture(str(tmp_path))["problems"] == []


def test_missing_gpu_node_and_failed_cuda_init(tmp_path):
    _copy(P2P, tmp_path)
    lines = [ln for ln in _read(P2P / "dev-nvidia.txt").splitlines() if "/dev/nvidia1" not in ln]
    (tmp_path / "dev-nvidia.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "cuda-init.json").write_text(
        json.dumps(
            {
                "loaded": True,
                "driver_cuda_version": 13000,
                "init_rc": 100,
                "init_error": "CUDA_ERROR_NO_DEVICE",
                "driver_version_rc": 0,
            }
        )
        + "\n"
    )
    facts = collect_from_fixture(str(tmp_path))
    assert facts["cuda"]["initialised"] is False
    assert facts["cuda"]["error"] == "cuInit failed: CUDA_ERROR_NO_DEVICE (100)"
    assert facts["cuda"]["driver_cuda_version"] == "13.0"
    assert facts["problems"][0] == (
        "device nodes missing: /dev/nvidia1; fix on the host: `nvidia-modprobe -c=<minor>` for "
        "each GPU"
    )
    assert (
        facts["problems"][1] == "CUDA cannot initialise: cuInit failed: CUDA_ERROR_NO_DEVICE (100)"
    )


def test_cuda_seeing_fewer_devices_than_nvidia_smi(tmp_path):
    _copy(P2P, tmp_path)
    (tmp_path / "cuda-init.json").write_text(
        '{"loaded": true, "driver_cuda_version": 13000, "init_rc": 0, "count_rc": 0, '
        '"device_count": 1}\n'
    )
    assert collect_from_fixture(str(tmp_path))["problems"] == [
        (
            "CUDA sees 1 device(s), nvidia-smi lists 2: CUDA_VISIBLE_DEVICES or the cgroup "
            "device rules hide some"
        )
    ]


# --- a module that does not load after a reboot: counts, not nvidia-smi's text (issue 33) ---

NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)


@pytest.mark.parametrize(
    ("capture", "on_bus"),
    [(GPU / "h200x2-device-2026-11-30", 2), (SYNTH, 8)],  # real 2x H200 sysfs; lspci -n, audio fn
)
def test_module_not_loaded_names_the_pci_count_and_nvidia_smis(tmp_path, capture, on_bus):
    """After a reboot into a driver whose module does not load there is no
    /proc/driver/nvidia (version or gpus) and nvidia-smi exits 9 with NVIDIA's text (as
    the lab's fake nvidia-smi prints it, molecule/resources/nvidia_driver/
    build-fake-cuda-repo.sh); the PCI listing is the capture's own (SOURCE.md)."""
    _copy(
        capture,
        tmp_path,
        skip=("proc-driver-nvidia-version.txt", "proc-driver-nvidia-gpus.txt"),
    )
    (tmp_path / "nvidia-smi-query-gpu.csv").write_text(NO_DRIVER)
    (tmp_path / "nvidia-smi-query-gpu.csv.rc").write_text("9\n")
    facts = collect_from_fixture(str(tmp_path))
    why = gf.not_answering(facts)
    assert why.startswith(
        f"nvidia-smi sees 0 GPU(s), {on_bus} NVIDIA GPU(s) on the PCI bus (vendor 10de, class "
        "03xx); no NVIDIA kernel module is loaded (no /proc/driver/nvidia/version): after a "
        "reboot the module did not load"
    )
    assert "couldn't communicate" not in why
    assert "NVIDIA-SMI" not in why


def test_not_answering_is_empty_when_nvidia_smi_answers_and_says_when_none_is_installed():
    assert gf.not_answering(collect_from_fixture(str(SYNTH))) == ""
    facts = gf.collect(
        lambda argv: (0, "", ""), nvidia_smi=None, lspci_text=_read(SYNTH / "lspci-n.txt")
    )
    assert gf.not_answering(facts) == (
        "nvidia-smi sees 0 GPU(s), 8 NVIDIA GPU(s) on the PCI bus (vendor 10de, class 03xx); "
        "no nvidia-smi is installed"
    )
    facts = gf.collect(lambda argv: (9, NO_DRIVER, ""), nvidia_smi="nvidia-smi")
    assert gf.not_answering(facts).startswith("nvidia-smi sees 0 GPU(s), the PCI bus was not read;")
