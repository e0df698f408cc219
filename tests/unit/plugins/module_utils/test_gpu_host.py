# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The seam: FixtureHost answers from captures, LiveHost from /proc, /sys and /dev;
gather() runs the same parsers on both. The live host is built here as a small
tree in tmp_path from the real 2x H200 capture (h200x2-nvlink-p2p/SOURCE.md)."""

import json

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_fabric as fab
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_host as gh
from ansible_collections.vllm_fleet.fleet.plugins.modules import vllm_cutover
from repo_paths import FIXTURES

P2P = FIXTURES / "gpu" / "h200x2-nvlink-p2p"


def _read(name):
    return (P2P / name).read_text()


def test_every_nvidia_smi_call_has_its_capture():
    smi = "nvidia-smi"
    assert gh.smi_key([smi, "--query-gpu=index,name", "--format=csv"]) == "query_gpu"
    fabric = [smi, "--query-gpu=" + ",".join(fab.FABRIC_QUERY_FIELDS), "--format=csv"]
    assert gh.smi_key(fabric) == "query_fabric"
    assert gh.smi_key([smi, "-q", "-x"]) == "xml"
    assert gh.smi_key([smi, "topo", "-m"]) == "topo"
    assert gh.smi_key([smi, "topo", "-p2p", "r"]) == "topo_p2p_r"
    assert gh.smi_key([smi, "--query-compute-apps=pid", "--format=csv"]) == "compute_apps"
    assert gh.smi_key([smi, "nvlink", "-s"]) is None
    assert set(gh.RUN_KEYS) <= set(gh.FIXTURE_FILES)


def test_fixture_host_exit_status_files(tmp_path):
    (tmp_path / "nvidia-smi-query-gpu.csv").write_text(
        (FIXTURES / "gpu" / "public" / "nvidia-smi-mismatch-tinygrad47.txt").read_text()
    )
    (tmp_path / "nvidia-smi-query-gpu.csv.rc").write_text("18\n")
    host = gh.FixtureHost(str(tmp_path))
    assert host.nvidia_smi == "nvidia-smi"
    rc, out, _err = host.run(["nvidia-smi", "--query-gpu=index", "--format=csv"])
    assert rc == 18
    assert out.startswith("Failed to initialize NVML")
    assert host.run(["nvidia-smi", "topo", "-m"])[0] == 127
    assert gh.FixtureHost(str(tmp_path / "x")).nvidia_smi is None


class _Smi:
    """nvidia-smi answering with the real capture, recording what it was asked."""

    def __init__(self):
        self.fixture = gh.FixtureHost(str(P2P))
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        if argv[0] == "/usr/bin/nvidia-smi":
            return self.fixture.run(argv)
        if argv[:2] == ["/usr/bin/timeout", "120"]:
            return (
                0,
                json.dumps(
                    {
                        "loaded": True,
                        "driver_cuda_version": 13000,
                        "init_rc": 0,
                        "count_rc": 0,
                        "device_count": 2,
                    }
                )
                + "\n",
                "",
            )
        return 127, "", f"unexpected {argv}"


def _live_tree(tmp_path):
    """/proc, /sys and /dev as the lent VM shows them, in tmp_path."""
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "version").write_text(_read("proc-driver-nvidia-version.txt"))
    gpus = proc / "gpus"
    for chunk in _read("proc-driver-nvidia-gpus.txt").split("== ")[1:]:
        path, _unused, body = chunk.partition("\n")
        slot = path.split("/")[-2]
        (gpus / slot).mkdir(parents=True)
        (gpus / slot / "information").write_text(body)
    devices = tmp_path / "sys" / "devices" / "pci0000:00"
    bus = tmp_path / "sys" / "bus"
    bus.mkdir(parents=True)
    for slot, klass, vendor, device in (
        ("0000:00:00.0", "0x060000", "0x8086", "0x0d57"),
        ("0000:00:06.0", "0x030200", "0x10de", "0x2335"),
        ("0000:00:07.0", "0x030200", "0x10de", "0x2335"),
    ):
        (devices / slot).mkdir(parents=True)
        for name, value in (("class", klass), ("vendor", vendor), ("device", device)):
            (devices / slot / name).write_text(value + "\n")
        (bus / slot).symlink_to(devices / slot)
    (tmp_path / "cmdline").write_text("console=ttyS0 reboot=k panic=1\n")
    (tmp_path / "dev").mkdir()
    return tmp_path


def test_live_host_reads_the_same_facts_as_the_capture(tmp_path, monkeypatch):
    tree = _live_tree(tmp_path)
    monkeypatch.setattr(gh, "_container_kind", lambda: None)
    smi = _Smi()
    host = gh.LiveHost(
        smi,
        "/usr/bin/nvidia-smi",
        paths={
            "proc_version": str(tree / "proc" / "version"),
            "proc_gpus": str(tree / "proc" / "gpus"),
            "sysfs_pci": str(tree / "sys" / "bus"),
            "cmdline": str(tree / "cmdline"),
            "iommu_groups": str(tree / "sys" / "kernel" / "iommu_groups"),
            "dev": str(tree / "dev"),
        },
        python="/usr/bin/python3",
        timeout_bin="/usr/bin/timeout",
        cuda_init=True,
    )
    live = gh.gather(host)
    seam = gh.collect_from_fixture(str(P2P))
    for key in ("gpu_count", "gpus", "driver_version", "cuda_version", "kernel_module", "topology"):
        assert live[key] == seam[key], key
    assert live["pci_gpu_slots"] == ["0000:00:06.0", "0000:00:07.0"]
    assert live["driver_gpu_slots"] == ["0000:00:06.0", "0000:00:07.0"]
    assert live["cuda"]["initialised"] is True
    assert live["cuda"]["device_count"] == 2
    assert live["fabric"]["gpus"][0]["bridges"] == []  # a VM: the GPU sits on the root bus
    assert live["fabric"]["iommu"] == {
        "groups": 0,
        "cmdline": {},
        "mode": "off",
        "cmdline_mode": "unknown",
    }
    assert live["fabric"]["acs_source"] == "sysfs"
    # No /dev/nvidia* in the tree: the nodes are named, with the host-side fix.
    assert live["device_nodes"] == {}
    assert live["problems"][0].startswith(
        "device nodes missing: /dev/nvidiactl, /dev/nvidia0, /dev/nvidia1; fix on the host"
    )
    assert ["/usr/bin/nvidia-smi", "topo", "-p2p", "r"] in smi.calls


def test_cuda_check_that_hangs_is_reported_not_raised(tmp_path):
    def run(argv):
        return 124, "", ""

    host = gh.LiveHost(
        run, None, python="/usr/bin/python3", timeout_bin="/usr/bin/timeout", cuda_init=True
    )
    result = gh.gpu_readers.parse_cuda_init(host.read("cuda_init"))
    assert result["initialised"] is False
    assert result["error"] == "cuInit failed: the check hung for 120 s and was killed (-1)"


def test_the_cutover_reads_processes_from_a_fixture_through_gpu_host():
    # vllm_cutover's gpu_reader with a gpu_facts_fixture_dir: gather() on the captures.
    synth = str(FIXTURES / "gpu" / "synthetic-rtxpro6000x8-pcie")
    facts = vllm_cutover.gpu_reader(None, synth)()
    assert [p["pid"] for p in facts["processes"]] == [4242]
    assert facts == gh.collect_from_fixture(synth)
