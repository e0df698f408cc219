# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""PCIe fabric facts and the warnings for tensor parallel on PCIe (issue 10, case 6).

Real inputs: the 2x H200 capture (h200x2-nvlink-p2p/SOURCE.md) and public lspci /
nvidia-smi outputs (public/SOURCE.md). The 8x RTX PRO 6000 PCIe host is synthetic
(its README says so); its bad variants below put real ACSCtl lines on its bridges.
"""

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_fabric as fab
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.gpu_host import (
    collect_from_fixture,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.nvidia_smi import GpuFactsError
from repo_paths import FIXTURES

GPU = FIXTURES / "gpu"
P2P = GPU / "h200x2-nvlink-p2p"
SYNTH = GPU / "synthetic-rtxpro6000x8-pcie"
PUBLIC = GPU / "public"
OFF = dict.fromkeys(fab.ACS_BITS, False)


def _read(path):
    return path.read_text()


def _synth_copy(tmp_path):
    for item in SYNTH.iterdir():
        (tmp_path / item.name).write_text(item.read_text())
    return tmp_path


# --- PCIe links, ECC, remapping ---


def test_real_pcie_ecc_query_with_the_renamed_field():
    rows = fab.parse_fabric_query(_read(P2P / "nvidia-smi-query-fabric.csv"))
    assert sorted(rows) == [0, 1]
    assert rows[0]["pci_bus_id"] == "00000000:00:06.0"
    assert rows[0]["pcie"] == {
        "gen_current": 5,
        "gen_max": 5,
        "width_current": 16,
        "width_max": 16,
        "pstate": "P0",
        "status": "ok",
        "why": "PCIe gen 5 x16",
    }
    assert rows[1]["ecc_mode"] == "Enabled"
    assert rows[1]["ecc_uncorrected_volatile"] == 0
    assert rows[1]["retired_pages_pending"] is None  # [N/A] on Hopper
    assert rows[1]["remapped_rows_pending"] is False
    assert rows[1]["remapped_rows_failure"] is False


@pytest.mark.parametrize(
    ("args", "status"),
    [
        ((1, 5, 16, 16, "P8"), "idle"),  # an idle RTX PRO 6000: no false alarm
        ((3, 5, 16, 16, "P0"), "degraded"),  # slow link at full clocks
        ((5, 5, 8, 16, "P0"), "degraded"),  # lanes lost
        ((1, 5, 8, 16, "P8"), "degraded"),  # lanes do not sleep
        ((5, 5, 16, 16, "P0"), "ok"),
        ((None, 5, 16, 16, "P0"), "unknown"),
    ],
)
def test_link_status_knows_idle_from_degraded(args, status):
    assert fab.link_status(*args)[0] == status


def test_idle_links_of_the_synthetic_host_raise_no_warning():
    facts = collect_from_fixture(str(SYNTH))
    assert {g["pcie"]["status"] for g in facts["fabric"]["gpus"]} == {"idle"}
    assert facts["fabric"]["warnings"] == []
    assert fab.fabric_warnings(facts, list(range(8)), 8) == []


def test_ecc_remapping_and_lanes_warn_with_the_fix(tmp_path):
    _synth_copy(tmp_path)
    text = _read(SYNTH / "nvidia-smi-query-fabric.csv")
    text = text.replace(
        "2, 00000000:3a:00.0, 1, 5, 16, 16, Enabled, 0, [N/A], No, No, P8",
        "2, 00000000:3a:00.0, 4, 5, 8, 16, Enabled, 3, [N/A], Yes, No, P0",
    ).replace(
        "5, 00000000:ab:00.0, 1, 5, 16, 16, Enabled, 0, [N/A], No, No, P8",
        "5, 00000000:ab:00.0, 1, 5, 16, 16, Enabled, 0, [N/A], No, Yes, P8",
    )
    (tmp_path / "nvidia-smi-query-fabric.csv").write_text(text)
    facts = collect_from_fixture(str(tmp_path))
    warnings = facts["fabric"]["warnings"]
    assert warnings == [
        (
            "GPU 2 (0000:3a:00.0): PCIe link degraded, x8 of x16 lanes: reseat the card, check "
            "the riser/cable and the slot's lane setting in the BIOS"
        ),
        (
            "GPU 2 (0000:3a:00.0): 3 uncorrected ECC error(s) since the driver loaded: drain it, "
            "reset the GPU (`nvidia-smi -r -i <index>`) or reboot, and check the kernel log for "
            "Xid 48/63/94/95"
        ),
        (
            "GPU 2 (0000:3a:00.0): a row remapping is pending: reset the GPU or reboot to apply "
            "it before serving"
        ),
        "GPU 5 (0000:ab:00.0): row remapping FAILED: the GPU's memory needs service (RMA)",
    ]
    # A model on GPUs 0,1 is not concerned; one on 4-7 sees GPU 5's only.
    assert fab.fabric_warnings(facts, [0, 1], 2) == []
    assert fab.fabric_warnings(facts, [4, 5, 6, 7], 1) == [warnings[3]]


def test_fabric_query_in_another_layout_is_refused():
    with pytest.raises(GpuFactsError, match="unrecognised format: wanted a header line"):
        fab.parse_fabric_query("0, 00000000:00:06.0, 5, 5\n")
    wanted = r"expected a whole number for pcie\.link\.gen\.current"
    with pytest.raises(GpuFactsError, match=wanted):
        fab.parse_fabric_query("index, pcie.link.gen.current\n0, Gen5\n")


# --- the driver's P2P matrix ---


def test_real_p2p_matrices():
    for letter in "rwna":
        p2p = fab.parse_p2p(_read(P2P / f"nvidia-smi-topo-p2p-{letter}.txt"))
        assert p2p == {
            "matrix": {"GPU0": {"GPU0": "X", "GPU1": "OK"}, "GPU1": {"GPU0": "OK", "GPU1": "X"}},
            "not_ok": [],
        }
    gns = fab.parse_p2p(_read(PUBLIC / "topo-p2p-r-2x5090-gns.txt"))
    assert gns["not_ok"] == [
        {"from": "GPU0", "to": "GPU1", "status": "GNS", "meaning": "GPU not supported"},
        {"from": "GPU1", "to": "GPU0", "status": "GNS", "meaning": "GPU not supported"},
    ]


def test_unknown_p2p_code_is_an_error():
    with pytest.raises(GpuFactsError, match="unrecognised P2P status 'YES'"):
        fab.parse_p2p(" \tGPU0\tGPU1\t\n GPU0\tX\tYES\t\n GPU1\tOK\tX\t\n")


# --- ACS ---


def test_acsctl_lines_from_public_threads():
    lines = fab.parse_acsctl_lines(_read(PUBLIC / "acsctl-grep-nccl523.txt"))
    assert len(lines) == 12
    assert lines[0] == {
        **OFF,
        "SrcValid": True,
        "ReqRedir": True,
        "CmpltRedir": True,
        "UpstreamFwd": True,
    }
    assert lines[3] == OFF
    assert lines[8] == {**OFF, "ReqRedir": True, "CmpltRedir": True}
    tabbed = fab.parse_acsctl_lines(_read(PUBLIC / "acsctl-grep-nccl629.txt"))
    assert tabbed[2]["ReqRedir"] is True
    assert tabbed[0] == OFF
    with pytest.raises(GpuFactsError, match="unrecognised ACSCtl line"):
        fab.parse_acsctl_lines("ACSCtl: SrcValid+ Bogus-\n")


def test_lspci_vvv_blocks_root_and_not_root():
    redirect = fab.parse_lspci_vvv(_read(PUBLIC / "lspci-vvv-amd-gpp-acs-redirect.txt"))
    assert redirect["0000:00:01.1"] == {
        "class": "PCI bridge",
        "name": "Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge (prog-if 00 "
        "[Normal decode])",
        "acs": {**OFF, "SrcValid": True, "ReqRedir": True, "CmpltRedir": True, "UpstreamFwd": True},
        "readable": True,
        "buses": None,  # the thread's excerpt starts below the Bus: line
    }
    assert redirect["0000:00:01.2"]["acs"] is None  # no ACS capability shown
    nonroot = fab.parse_lspci_vvv(_read(PUBLIC / "lspci-vvv-pex890xx-nonroot.txt"))
    assert nonroot == {
        "0000:a9:03.0": {
            "class": "PCI bridge",
            "name": "Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0) (prog-if 00 "
            "[Normal decode])",
            "acs": None,
            "readable": False,
            "buses": (0xAD, 0xAD),  # "Bus: primary=a9, secondary=ad, subordinate=ad"
        }
    }


def test_lspci_n_where_lspci_vvv_is_wanted_is_refused():
    with pytest.raises(GpuFactsError, match="device lines only"):
        fab.parse_lspci_vvv(_read(SYNTH / "lspci-n.txt"))


def _config_with_acs(control, acs_at=0x2A0):
    """A 4096-byte PCIe config space: an AER capability at 0x100 pointing to ACS."""
    config = bytearray(4096)
    config[0x100:0x104] = (0x0001 | (1 << 16) | (acs_at << 20)).to_bytes(4, "little")
    config[acs_at : acs_at + 4] = (0x000D | (1 << 16)).to_bytes(4, "little")
    config[acs_at + 4 : acs_at + 6] = (0x005F).to_bytes(2, "little")  # capabilities
    config[acs_at + 6 : acs_at + 8] = control.to_bytes(2, "little")
    return bytes(config)


def test_acs_control_from_config_space():
    # NVIDIA/nccl#2079: "ACSCtl: 0x001d = SrcValid+, ReqRedir+, CmpltRedir+, UpstreamFwd+".
    assert fab.acs_from_config(_config_with_acs(0x001D)) == {
        **OFF,
        "SrcValid": True,
        "ReqRedir": True,
        "CmpltRedir": True,
        "UpstreamFwd": True,
    }
    assert fab.acs_from_config(_config_with_acs(0)) == OFF
    no_acs = bytearray(4096)
    no_acs[0x100:0x104] = (0x0001 | (1 << 16)).to_bytes(4, "little")
    assert fab.acs_from_config(bytes(no_acs)) is None
    with pytest.raises(GpuFactsError, match=r"has 64 bytes.*read it as root"):
        fab.acs_from_config(bytes(64))


def test_sysfs_acs_round_trip(tmp_path):
    for bus, config in (("0000:17:01.0", _config_with_acs(0x001D)), ("0000:29:01.0", bytes(64))):
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "config").write_bytes(config)
    text = fab.read_sysfs_acs(["0000:17:01.0", "0000:29:01.0", "0000:39:01.0"], str(tmp_path))
    assert text == (
        "0000:17:01.0 acsctl=0x001d\n0000:29:01.0 acs=unreadable\n0000:39:01.0 acs=unreadable\n"
    )
    parsed = fab.parse_sysfs_acs(text)
    assert parsed["0000:17:01.0"]["acs"]["CmpltRedir"] is True
    assert parsed["0000:29:01.0"] == {"class": None, "acs": None, "readable": False}


# --- paths, IOMMU ---


def test_pci_paths_give_the_bridges_above(tmp_path):
    paths = fab.parse_pci_paths(
        "0000:03:00.0 /sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:08.0/0000:03:00.0\n"
    )
    assert paths == {"0000:03:00.0": ["0000:00:01.1", "0000:01:00.0", "0000:02:08.0"]}
    with pytest.raises(GpuFactsError, match="does not end at it"):
        fab.parse_pci_paths("0000:03:00.0 /sys/devices/pci0000:00/0000:00:01.1\n")
    # read_pci_paths follows the sysfs links.
    real = tmp_path / "devices" / "pci0000:00" / "0000:00:01.1" / "0000:01:00.0"
    real.mkdir(parents=True)
    bus = tmp_path / "bus"
    bus.mkdir()
    (bus / "0000:01:00.0").symlink_to(real)
    text = fab.read_pci_paths(["0000:01:00.0", "0000:99:00.0"], str(bus))
    assert fab.parse_pci_paths(text) == {"0000:01:00.0": ["0000:00:01.1"]}


def test_iommu_state(tmp_path):
    groups = tmp_path / "iommu_groups"
    (groups / "27").mkdir(parents=True)
    (groups / "27" / "type").write_text("DMA-FQ\n")
    (groups / "28").mkdir()
    devices = tmp_path / "devices"
    (devices / "0000:18:00.0").mkdir(parents=True)
    (devices / "0000:18:00.0" / "iommu_group").symlink_to(groups / "27")
    (devices / "0000:2a:00.0").mkdir()
    text = fab.read_iommu(["0000:18:00.0", "0000:2a:00.0"], str(groups), str(devices))
    assert text == "groups 2\n0000:18:00.0 group 27 type DMA-FQ\n0000:2a:00.0 group none\n"
    parsed = fab.parse_iommu(text)
    assert parsed["gpus"]["0000:18:00.0"] == {"group": 27, "type": "DMA-FQ"}
    assert fab.read_iommu([], str(tmp_path / "none"), str(devices)) == "groups 0\n"
    assert fab.parse_cmdline(_read(SYNTH / "proc-cmdline.txt")) == {
        "intel_iommu": "on",
        "iommu": "pt",
    }


# --- the warnings for tensor parallel on PCIe ---


def _with_redirect_on(tmp_path, buses):
    _synth_copy(tmp_path)
    redirect = _read(PUBLIC / "acsctl-grep-nccl629.txt").splitlines()[2].strip()
    blocks = _read(SYNTH / "lspci-vvv.txt").split("\n\n")
    for i, block in enumerate(blocks):
        head = next(ln for ln in block.splitlines() if not ln.startswith("#"))
        if any(
            head.startswith(b)
            for b in buses
        ):
            blocks[i] = "\n".join(
                ("\t\t" + redirect) if ln.strip().startswith("ACSCtl:") else ln
                for ln in block.splitlines()
            )
    (tmp_path / "lspci-vvv.txt").write_text("\n\n".join(blocks))
    return collect_from_fixture(str(tmp_path))


def test_acs_redirect_between_the_models_gpus_warns_with_the_fix(tmp_path):
    facts = _with_redirect_on(tmp_path, ["17:01.0", "29:01.0"])
    bridges = facts["fabric"]["gpus"][0]["bridges"]
    assert bridges == [
        {
            "bus_id": "0000:17:01.0",
            "acs": {
                **OFF,
                "SrcValid": True,
                "ReqRedir": True,
                "CmpltRedir": True,
                "UpstreamFwd": True,
            },
            "readable": True,
        }
    ]
    (warning,) = fab.fabric_warnings(facts, [0, 1, 2, 3], 4)
    assert warning.startswith(
        "tensor parallel 4 on GPUs 0,1,2,3: ACS redirect is on at PCIe bridge(s) 0000:17:01.0 "
        "(ReqRedir+ CmpltRedir+), 0000:29:01.0 (ReqRedir+ CmpltRedir+): peer-to-peer traffic"
    )
    assert "setpci -s <bridge> ECAP_ACS+0x6.w=0000" in warning
    assert "NCCL_P2P_DISABLE=1" in warning
    # Tensor parallel 1, or GPUs whose bridges are clean: nothing to say.
    assert fab.fabric_warnings(facts, [0, 1, 2, 3], 1) == []
    assert fab.fabric_warnings(facts, [4, 5, 6, 7], 4) == []


def test_acs_not_readable_without_root_says_so(tmp_path):
    _synth_copy(tmp_path)
    text = _read(SYNTH / "lspci-vvv.txt")
    lines = []
    skip = False
    for line in text.splitlines():
        if line.startswith("\tCapabilities: [2a0 v1] Access Control Services"):
            lines.append("\tCapabilities: <access denied>")
            skip = True
            continue
        if skip and line.startswith("\t\t"):
            continue
        skip = False
        lines.append(line)
    (tmp_path / "lspci-vvv.txt").write_text("\n".join(lines) + "\n")
    facts = collect_from_fixture(str(tmp_path))
    (warning,) = fab.fabric_warnings(facts, [0, 1], 2)
    assert warning.startswith(
        "tensor parallel 2 on GPUs 0,1: the ACS state of bridge(s) 0000:17:01.0, 0000:29:01.0 "
        "could not be read"
    )


def test_p2p_not_ok_and_iommu_translating_warn(tmp_path):
    _synth_copy(tmp_path)
    p2p = _read(SYNTH / "nvidia-smi-topo-p2p-r.txt").splitlines()
    p2p[2] = p2p[2].replace("X\tOK", "X\tCNS", 1)  # GPU0 -> GPU1
    (tmp_path / "nvidia-smi-topo-p2p-r.txt").write_text("\n".join(p2p) + "\n")
    (tmp_path / "sysfs-iommu.txt").write_text(
        _read(SYNTH / "sysfs-iommu.txt").replace("type identity", "type DMA-FQ")
    )
    (tmp_path / "proc-cmdline.txt").write_text("BOOT_IMAGE=/vmlinuz ro intel_iommu=on\n")
    facts = collect_from_fixture(str(tmp_path))
    assert facts["fabric"]["iommu"] == {
        "groups": 212,
        "cmdline": {"intel_iommu": "on"},
        "mode": "translated",
        "cmdline_mode": "on",
    }
    first, second = fab.fabric_warnings(facts, [0, 1], 2)
    assert first.startswith(
        "tensor parallel 2 on GPUs 0,1: the driver reports PCIe peer-to-peer reads not OK "
        "(GPU0<->GPU1 CNS;"
    )
    assert second.startswith(
        "tensor parallel 2 on GPUs 0,1: the IOMMU translates DMA for GPU0, GPU1 (iommu group "
        "type DMA/DMA-FQ; kernel command line {'intel_iommu': 'on'})"
    )
    assert "`iommu=pt`" in second


def test_nvlink_gpus_need_no_pcie_warning():
    facts = collect_from_fixture(str(P2P))
    assert facts["topology"]["gpu_pairs"] == {"GPU0-GPU1": "NV18"}
    assert fab.fabric_warnings(facts, [0, 1], 2) == []


def test_pcie_gpus_without_any_acs_reading_say_it_was_not_read(tmp_path):
    _synth_copy(tmp_path)
    (tmp_path / "lspci-vvv.txt").unlink()
    facts = collect_from_fixture(str(tmp_path))
    assert facts["fabric"]["acs_source"] is None
    (warning,) = fab.fabric_warnings(facts, [0, 4], 2)
    assert "ACS on the PCIe bridges was not read" in warning
