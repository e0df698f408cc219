# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""gpu_readers: the PCI listing, /proc/driver/nvidia/gpus, /dev nodes and the CUDA check."""

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_readers as rd
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import nvidia_smi as smi
from repo_paths import FIXTURES

GPU = FIXTURES / "gpu"
H200 = FIXTURES / "gpu" / "h200x2-nvlink"
P2P = GPU / "h200x2-nvlink-p2p"


def _read(path):
    return path.read_text()


def test_sysfs_pci_rendering(tmp_path):
    for slot, vendor, klass, device in [
        ("0000:00:06.0", "0x10de", "0x030200", "0x2335"),
        ("0000:00:01.0", "0x8086", "0x030000", "0x1234"),
        ("0000:00:07.0", "0x10de", "0x040300", "0x22e8"),
    ]:
        d = tmp_path / slot
        d.mkdir()
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(klass + "\n")
        (d / "device").write_text(device + "\n")
    text = rd.read_sysfs_pci(str(tmp_path))
    assert text.splitlines()[1] == "0000:00:06.0 0x030200 0x10de:0x2335"
    assert rd.parse_lspci_n(text) == ["0000:00:06.0"]
    assert rd.read_sysfs_pci(str(tmp_path / "missing")) is None


def test_cuda_init_results():
    ok = rd.parse_cuda_init(
        '{"library": "libcuda.so.1", "loaded": true, "driver_version_rc": 0, '
        '"driver_cuda_version": 13000, "init_rc": 0, "init_error": "CUDA_SUCCESS", '
        '"count_rc": 0, "device_count": 2}\n'
    )
    assert ok == {
        "checked": True,
        "library_loaded": True,
        "initialised": True,
        "device_count": 2,
        "driver_cuda_version": "13.0",
        "error": None,
    }
    missing = rd.parse_cuda_init(
        '{"library": "libcuda.so.1", "loaded": false, "error": "libcuda.so.1: cannot open '
        'shared object file: No such file or directory"}'
    )
    assert missing["initialised"] is False
    assert missing["error"].startswith("cannot load libcuda.so.1: libcuda.so.1: cannot open")
    with pytest.raises(smi.GpuFactsError, match="no JSON line"):
        rd.parse_cuda_init("Segmentation fault\n")


def test_proc_gpus_information_real():
    gpus = rd.parse_proc_gpus(_read(P2P / "proc-driver-nvidia-gpus.txt"))
    assert gpus == {
        "0000:00:06.0": {
            "model": "NVIDIA H200",
            "minor": 0,
            "uuid": "GPU-336b8cd9-8fa4-bc5c-0246-1d10100c6553",
        },
        "0000:00:07.0": {
            "model": "NVIDIA H200",
            "minor": 1,
            "uuid": "GPU-5270b8dc-b21c-f6e1-3747-d04b8410093b",
        },
    }
    with pytest.raises(smi.GpuFactsError, match="no 'Bus Location'"):
        rd.parse_proc_gpus("Model: \t\t NVIDIA H200\nIRQ: 41\n")


def test_live_device_nodes_are_character_devices_only(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidia0").write_text("")  # a plain file is not a device node
    assert rd.read_device_nodes(str(dev)) == ""
    real = rd.read_device_nodes("/dev")
    # /dev/null is 1:3 everywhere; make sure the renderer's layout parses back.
    assert rd.parse_device_nodes("c 1:3 /dev/null\n") == {"/dev/null": "1:3"}
    assert all(line.startswith("c ") for line in real.splitlines())
