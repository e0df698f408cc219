# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The GPU fabric: PCIe links, ECC and row remapping, ACS on the bridges above
each GPU, IOMMU state and the driver's peer-to-peer status matrix.

Plain functions over text (or bytes of PCI config space), so captured outputs
drive them in tests. Standard library only (runs on target hosts).
What the field knows about these (cited in tests/fixtures/gpu/SOURCE.md):
- ACS redirect bits (ReqRedir+ / CmpltRedir+) on PCIe bridges force peer-to-
  peer traffic up to the root complex and the IOMMU; NCCL then hangs at start
  or crawls (NVIDIA/nccl#2079, NVIDIA/nccl#606, NCCL troubleshooting guide).
- An idle GPU drops its PCIe link generation in low P-states (P8): a low
  current generation is normal unless the GPU is in P0.
"""

from __future__ import annotations

import os
import re

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.nvidia_smi import (
    GpuFactsError,
    _first_line,
    _na,
    _topology_table,
    link_class,
    normalise_bus_id,
)

# `nvidia-smi --query-gpu=<these> --format=csv` (with its header: drivers
# rename fields, e.g. clocks_throttle_reasons -> clocks_event_reasons).
FABRIC_QUERY_FIELDS = (
    "index",
    "pci.bus_id",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "pstate",
)

# ACS control register bits (PCIe base spec, ACS extended capability, +0x6),
# in the order and with the names `lspci -vvv` prints them.
ACS_BITS = (
    "SrcValid",
    "TransBlk",
    "ReqRedir",
    "CmpltRedir",
    "UpstreamFwd",
    "EgressCtrl",
    "DirectTrans",
)
# Bits that send peer-to-peer requests/completions elsewhere than the peer.
ACS_REDIRECT_BITS = ("ReqRedir", "CmpltRedir", "EgressCtrl")
# NCCL's troubleshooting guide ('PCI Access Control Services (ACS)'): "If lines
# show SrcValid+, then ACS might be enabled" -- any control bit on counts as ACS
# enabled on that bridge, the redirect bits being the ones that certainly send
# peer-to-peer traffic up to the root complex.
NCCL_ACS_GUIDE = (
    "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
    "#pci-access-control-services-acs"
)
ACS_EXT_CAP_ID = 0x000D
CONFIG_SPACE_BYTES = 4096  # PCIe config space; a non-root read gets only the first 64

# `nvidia-smi topo -p2p r` legend.
P2P_STATUS = {
    "X": "self",
    "OK": "status OK",
    "CNS": "chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "topology not supported",
    "NS": "not supported",
    "DR": "disabled by regkey",
    "U": "unknown",
}

ACS_FIX = (
    "disable ACS for these bridges: in the firmware (BIOS: ACS / 'PCIe ACS control' off, or "
    "VT-d / IOMMU off), or at every boot with `setpci -s <bridge> ECAP_ACS+0x6.w=0000` per "
    f"bridge (NCCL troubleshooting guide, 'PCI Access Control Services': {NCCL_ACS_GUIDE}); "
    "where that is not possible, set NCCL_P2P_DISABLE=1 in the model's environment (it costs "
    "bandwidth: GPU-to-GPU traffic is staged through host memory, but NCCL does not hang)"
)
IOMMU_FIX = (
    "boot with the IOMMU in pass-through (`iommu=pt`, with `intel_iommu=on` or "
    "`amd_iommu=on` as needed) or off, or set NCCL_P2P_DISABLE=1 in the model's environment"
)

_GEN_RE = re.compile(r"^\d+$")
_SLOT_RE = re.compile(r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_LSPCI_HEAD_RE = re.compile(
    r"^(?P<slot>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<klass>[^:]+):\s*(?P<name>.*)$"
)
_ACS_FLAG_RE = re.compile(r"([A-Za-z]+)([+-])")
_BRIDGE_BUS_RE = re.compile(
    r"^Bus: primary=(?P<primary>[0-9a-fA-F]{2}), secondary=(?P<secondary>[0-9a-fA-F]{2}), "
    r"subordinate=(?P<subordinate>[0-9a-fA-F]{2})"
)
_FULL_SLOT_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def _int_or_none(value, what):
    if _na(value):
        return None
    text = value.strip()
    if not _GEN_RE.match(text):
        raise GpuFactsError(f"expected a whole number for {what}, found {value!r}")
    return int(text)


def _yes_no(value):
    if _na(value):
        return None
    text = value.strip().lower()
    if text in ("yes", "no"):
        return text == "yes"
    raise GpuFactsError(f"expected Yes or No, found {value!r}")


def link_status(gen_current, gen_max, width_current, width_max, pstate):
    """('ok'|'idle'|'degraded'|'unknown', why).

    A width below the maximum is degraded whatever the P-state (lanes do not
    sleep). A generation below the maximum is normal in a low P-state (P2..P12:
    the GPU slows the link when idle) and degraded only in P0, where the GPU
    runs at full clocks and its link should be at full speed too.
    """
    if None in (gen_current, gen_max, width_current, width_max):
        return "unknown", "nvidia-smi does not report the PCIe link"
    if width_current < width_max:
        return "degraded", (
            f"x{width_current} of x{width_max} lanes: reseat the card, check the riser/cable and "
            "the slot's lane setting in the BIOS"
        )
    if gen_current < gen_max:
        if (pstate or "").strip().upper() == "P0":
            return "degraded", (
                f"PCIe gen {gen_current} of {gen_max} in P0 (full clocks): check the slot's speed "
                "setting in the BIOS, the riser/retimer and `dmesg` for link retraining"
            )
        return "idle", (
            f"PCIe gen {gen_current} of {gen_max} in {pstate}: normal for an idle GPU (the link "
            "speeds up under load)"
        )
    return "ok", f"PCIe gen {gen_current} x{width_current}"


def parse_fabric_query(text):
    """Parse `nvidia-smi --query-gpu=<FABRIC_QUERY_FIELDS> --format=csv` (header needed).

    Returns {index: {"index", "pci_bus_id", "pcie": {...}, "ecc_mode",
    "ecc_uncorrected_volatile", "retired_pages_pending", "remapped_rows_pending",
    "remapped_rows_failure"}}.
    """
    rows = [
        [cell.strip() for cell in line.split(",")]
        for line in (text or "").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    if not rows or rows[0][0] != "index":
        raise GpuFactsError(
            "the PCIe/ECC query output is in an unrecognised format: wanted a header line "
            f"starting with 'index' (--format=csv), found {_first_line(text)!r}"
        )
    fields = [re.sub(r"\s*\[[^\]]*\]$", "", cell) for cell in rows[0]]
    result = {}
    for row in rows[1:]:
        if len(row) != len(fields) or not row[0].isdigit():
            raise GpuFactsError(
                f"unrecognised line in the PCIe/ECC query output: expected {len(fields)} fields "
                f"({', '.join(fields)}), found {','.join(row)!r}"
            )
        raw = dict(zip(fields, row, strict=True))
        gen_cur = _int_or_none(raw.get("pcie.link.gen.current"), "pcie.link.gen.current")
        gen_max = _int_or_none(raw.get("pcie.link.gen.max"), "pcie.link.gen.max")
        width_cur = _int_or_none(raw.get("pcie.link.width.current"), "pcie.link.width.current")
        width_max = _int_or_none(raw.get("pcie.link.width.max"), "pcie.link.width.max")
        pstate = None if _na(raw.get("pstate")) else raw["pstate"].strip()
        status, why = link_status(gen_cur, gen_max, width_cur, width_max, pstate)
        ecc = raw.get("ecc.mode.current")
        index = int(row[0])
        result[index] = {
            "index": index,
            "pci_bus_id": raw.get("pci.bus_id"),
            "pcie": {
                "gen_current": gen_cur,
                "gen_max": gen_max,
                "width_current": width_cur,
                "width_max": width_max,
                "pstate": pstate,
                "status": status,
                "why": why,
            },
            "ecc_mode": None if _na(ecc) else ecc.strip(),
            "ecc_uncorrected_volatile": _int_or_none(
                raw.get("ecc.errors.uncorrected.volatile.total"),
                "ecc.errors.uncorrected.volatile.total",
            ),
            "retired_pages_pending": _yes_no(raw.get("retired_pages.pending")),
            "remapped_rows_pending": _yes_no(raw.get("remapped_rows.pending")),
            "remapped_rows_failure": _yes_no(raw.get("remapped_rows.failure")),
        }
    return result


def parse_p2p(text):
    """Parse `nvidia-smi topo -p2p r` (or w/n/a): the driver's P2P status matrix.

    Returns {"matrix": {"GPU0": {"GPU1": "OK"}}, "not_ok": [{"from", "to",
    "status", "meaning"}]}; an unknown status code raises GpuFactsError.
    """
    header, body = _topology_table(text, "nvidia-smi topo -p2p")
    matrix, not_ok = {}, []
    for row in body:
        cells = [c for c in row if c != ""] if row and row[0] == "" else row
        name, rest = cells[0], [c for c in cells[1:] if c != ""]
        if len(rest) != len(header):
            raise GpuFactsError(
                f"topo -p2p row {name!r} has {len(rest)} cells, wanted {len(header)}"
            )
        matrix[name] = {}
        for peer, code in zip(header, rest, strict=True):
            if code not in P2P_STATUS:
                raise GpuFactsError(
                    f"unrecognised P2P status {code!r} for {name}->{peer} in nvidia-smi topo -p2p "
                    f"(known: {', '.join(P2P_STATUS)})"
                )
            matrix[name][peer] = code
            if code not in ("X", "OK"):
                not_ok.append(
                    {"from": name, "to": peer, "status": code, "meaning": P2P_STATUS[code]}
                )
    return {"matrix": matrix, "not_ok": not_ok}


def _acs_flags(text):
    flags = {name: sign == "+" for name, sign in _ACS_FLAG_RE.findall(text)}
    unknown = set(flags) - set(ACS_BITS)
    if not flags or unknown:
        raise GpuFactsError(f"unrecognised ACSCtl line: {text.strip()!r}")
    return flags


def parse_acsctl_lines(text):
    """The ACSCtl lines of `lspci -vvv | grep ACSCtl` as flag dicts, in order."""
    found = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        stripped = line.strip()
        if not stripped.startswith("ACSCtl:"):
            raise GpuFactsError(f"unrecognised line, wanted 'ACSCtl: ...': {stripped[:120]!r}")
        found.append(_acs_flags(stripped[len("ACSCtl:") :]))
    return found


def _lspci_detail(current, stripped):
    """Read one indented `lspci -vvv` line into its device (ACS, readability, buses)."""
    if stripped.startswith("Capabilities: <access denied>"):
        current["readable"] = False
    elif stripped.startswith("ACSCtl:"):
        current["acs"] = _acs_flags(stripped[len("ACSCtl:") :])
    else:
        buses = _BRIDGE_BUS_RE.match(stripped)
        if buses:
            current["buses"] = (int(buses["secondary"], 16), int(buses["subordinate"], 16))


def parse_lspci_vvv(text):
    """Per-device ACS control bits from `lspci -vvv` (as root).

    Returns {bus_id: {"class", "name", "acs": {"SrcValid": bool, ...} or None,
    "readable": bool, "buses": (secondary, subordinate) or None}}: acs None
    means the device has no ACS capability; readable False means lspci could
    not read its capabilities (not root: "Capabilities: <access denied>"), so
    its ACS state is unknown; buses is a bridge's range of bus numbers below it
    (its `Bus: primary=.., secondary=.., subordinate=..` line).
    """
    devices, current = {}, None
    saw_detail = False
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        if not line[:1].isspace():
            head = _LSPCI_HEAD_RE.match(line.strip())
            if head:
                current = {
                    "class": head.group("klass").strip(),
                    "name": head.group("name").strip(),
                    "acs": None,
                    "readable": True,
                    "buses": None,
                }
                devices[normalise_bus_id(head.group("slot"))] = current
                continue
            if line.startswith(("pcilib:", "#")):
                continue
            raise GpuFactsError(f"unrecognised line in lspci -vvv output: {line.strip()[:120]!r}")
        saw_detail = True
        if current is None:
            raise GpuFactsError(
                f"lspci -vvv output starts with a detail line, not a device: {line.strip()[:120]!r}"
            )
        _lspci_detail(current, line.strip())
    if devices and not saw_detail:
        raise GpuFactsError(
            "this PCI listing has device lines only (like `lspci -n`), not the `lspci -vvv` "
            "detail that holds the ACS control bits"
        )
    return devices


def acs_from_config(config):
    """ACS control bits from a device's PCI config space bytes (sysfs `config`).

    Walks the extended capability list from offset 0x100. Returns the flags
    dict, None when the device has no ACS capability, or raises GpuFactsError
    when the extended space is not readable (under 4096 bytes: not root).
    """
    if len(config) < CONFIG_SPACE_BYTES:
        raise GpuFactsError(
            f"PCI config space has {len(config)} bytes, the extended capabilities need 4096 "
            "(read it as root)"
        )
    offset, seen = 0x100, set()
    while offset and offset not in seen and offset + 8 <= len(config):
        seen.add(offset)
        header = int.from_bytes(config[offset : offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == ACS_EXT_CAP_ID:
            control = int.from_bytes(config[offset + 6 : offset + 8], "little")
            return {name: bool(control >> bit & 1) for bit, name in enumerate(ACS_BITS)}
        offset = (header >> 20) & 0xFFC
    return None


def read_sysfs_acs(bus_ids, root="/sys/bus/pci/devices"):
    """Render ACS control of bus_ids from sysfs config space: `<bus> acsctl=0x001d` lines."""
    lines = []
    for bus in bus_ids:
        try:
            with open(os.path.join(root, bus, "config"), "rb") as handle:
                acs = acs_from_config(handle.read())
        except (OSError, GpuFactsError):
            lines.append(f"{bus} acs=unreadable")
            continue
        if acs is None:
            lines.append(f"{bus} acs=none")
        else:
            value = sum(1 << bit for bit, name in enumerate(ACS_BITS) if acs[name])
            lines.append(f"{bus} acsctl=0x{value:04x}")
    return "\n".join(lines) + ("\n" if lines else "")


def parse_sysfs_acs(text):
    """Read read_sysfs_acs's lines back into parse_lspci_vvv's shape (class unknown)."""
    devices = {}
    for line in (text or "").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = re.match(
            r"^(\S+)\s+(?:acsctl=0x([0-9a-fA-F]{1,4})|acs=(none|unreadable))$", line.strip()
        )
        if not match:
            raise GpuFactsError(
                f"unrecognised line in the sysfs ACS listing: {line.strip()!r}; wanted "
                "'<bus id> acsctl=0x001d', '<bus id> acs=none' or '<bus id> acs=unreadable'"
            )
        bus, value, word = match.groups()
        entry = {"class": None, "acs": None, "readable": word != "unreadable"}
        if value is not None:
            number = int(value, 16)
            entry["acs"] = {name: bool(number >> bit & 1) for bit, name in enumerate(ACS_BITS)}
        devices[normalise_bus_id(bus)] = entry
    return devices


def read_pci_paths(bus_ids, root="/sys/bus/pci/devices"):
    """Render `<bus> <sysfs device path>` for bus_ids (the path holds the bridges above)."""
    lines = []
    for bus in bus_ids:
        path = os.path.join(root, bus)
        if os.path.exists(path):
            lines.append(f"{bus} {os.path.realpath(path)}")
    return "\n".join(lines) + ("\n" if lines else "")


def parse_pci_paths(text):
    """{gpu bus id: [bridge bus ids from the root down]} from `<bus> <path>` lines."""
    paths = {}
    for line in (text or "").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or "/devices/" not in parts[1]:  # noqa: PLR2004 - "<bus> <path>"
            raise GpuFactsError(
                f"unrecognised line in the PCI path listing: {line.strip()!r}; wanted "
                "'<bus id> /sys/devices/pci0000:00/0000:00:01.0/.../<bus id>'"
            )
        bus = normalise_bus_id(parts[0])
        chain = [c for c in parts[1].split("/") if _FULL_SLOT_RE.match(c.lower())]
        chain = [normalise_bus_id(c) for c in chain]
        if not chain or chain[-1] != bus:
            raise GpuFactsError(f"the PCI path of {bus} does not end at it: {parts[1]!r}")
        paths[bus] = chain[:-1]
    return paths


def pci_paths_from_lspci(devices, gpu_bus_ids):
    """{gpu bus id: [bridges from the root down]} from parse_lspci_vvv's bus ranges.

    A bridge is above a GPU when the GPU's bus number lies in the bridge's
    secondary..subordinate range (same PCI domain); outer bridges sit on lower
    bus numbers, so the chain is ordered by secondary bus. This is what
    `lspci -vvv` gives of the hierarchy without `lspci -tv` or sysfs paths.
    GPUs not in the listing are left out.
    """
    bridges = [(bus, dev["buses"]) for bus, dev in (devices or {}).items() if dev.get("buses")]
    paths = {}
    for gpu in gpu_bus_ids:
        if gpu not in (devices or {}):
            continue
        domain, bus = gpu.split(":")[0], int(gpu.split(":")[1], 16)
        above = [
            (rng[0], b)
            for b, rng in bridges
            if b.split(":")[0] == domain and rng[0] <= bus <= rng[1] and b != gpu
        ]
        paths[gpu] = [b for _sec, b in sorted(above)]
    return paths


def iommu_from_cmdline(cmdline):
    """'off' | 'on' | 'passthrough' | 'unknown' from the kernel command line's parameters.

    `iommu=off`, `intel_iommu=off`, `amd_iommu=off` turn it off; `iommu=pt` or
    `iommu.passthrough=1` put DMA in pass-through (identity); `intel_iommu=on`
    or `amd_iommu=on` (without pt) translate DMA. Nothing said: unknown (the
    kernel's and firmware's defaults decide).
    """
    if cmdline.get("iommu") == "off" or "off" in (
        cmdline.get("intel_iommu"),
        cmdline.get("amd_iommu"),
    ):
        return "off"
    if cmdline.get("iommu") == "pt" or cmdline.get("iommu.passthrough") == "1":
        return "passthrough"
    if (
        "on" in (cmdline.get("intel_iommu"), cmdline.get("amd_iommu"))
        or cmdline.get("iommu.passthrough") == "0"
    ):
        return "on"
    return "unknown"


def parse_cmdline(text):
    """IOMMU- and ACS-related kernel parameters from /proc/cmdline."""
    keys = ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough", "iommu.strict", "pci")
    found = {}
    for token in (text or "").split():
        key, _sep, value = token.partition("=")
        if key in keys:
            found[key] = value
    return found


def read_iommu(
    bus_ids, groups_root="/sys/kernel/iommu_groups", devices_root="/sys/bus/pci/devices"
):
    """Render IOMMU state: `groups N`, then `<bus> group G type T` per GPU."""
    try:
        count = len(os.listdir(groups_root))
    except OSError:
        count = 0
    lines = [f"groups {count}"]
    for bus in bus_ids:
        link = os.path.join(devices_root, bus, "iommu_group")
        if not os.path.exists(link):
            lines.append(f"{bus} group none")
            continue
        group = os.path.basename(os.path.realpath(link))
        try:
            with open(os.path.join(groups_root, group, "type")) as handle:
                kind = handle.read().strip() or "unknown"
        except OSError:
            kind = "unknown"
        lines.append(f"{bus} group {group} type {kind}")
    return "\n".join(lines) + "\n"


def parse_iommu(text):
    """{"groups": N, "gpus": {bus: {"group", "type"}}} from read_iommu's lines."""
    result = {"groups": None, "gpus": {}}
    for line in (text or "").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = re.match(r"^groups (\d+)$", line.strip())
        if match:
            result["groups"] = int(match.group(1))
            continue
        match = re.match(r"^(\S+) group (none|\d+)(?: type (\S+))?$", line.strip())
        if not match:
            raise GpuFactsError(
                f"unrecognised line in the IOMMU listing: {line.strip()!r}; wanted 'groups N' or "
                "'<bus id> group G type DMA-FQ'"
            )
        bus, group, kind = match.groups()
        result["gpus"][normalise_bus_id(bus)] = {
            "group": None if group == "none" else int(group),
            "type": kind,
        }
    if result["groups"] is None and (text or "").strip():
        raise GpuFactsError("the IOMMU listing has no 'groups N' line")
    return result


def _iommu_mode(cmdline, iommu):
    """'off' | 'passthrough' | 'translated' | 'unknown' for the host as a whole."""
    types = {g.get("type") for g in (iommu or {}).get("gpus", {}).values() if g.get("type")}
    if types:
        if types <= {"identity"}:
            return "passthrough"
        return "translated"
    if (iommu or {}).get("groups") == 0:
        return "off"
    stated = iommu_from_cmdline(cmdline)
    # "on" from the command line is translation; the groups' types were not read.
    return "translated" if stated == "on" else stated


def fabric_facts(
    gpus,
    query_text=None,
    p2p_text=None,
    lspci_vvv_text=None,
    acs_text=None,
    paths_text=None,
    cmdline_text=None,
    iommu_text=None,
):
    """The fabric facts of the GPUs nvidia-smi lists (`gpus` from gpu_facts).

    Every input is optional text (None: not read). Returns a dict with
    `gpus` (per index: pcie link, ECC, remapping, bridges above with their
    ACS bits, IOMMU group), `p2p_read`, `iommu`, `acs_source` and `warnings`
    (model-independent: degraded links, ECC errors, pending/failed remapping).
    """
    query = parse_fabric_query(query_text) if query_text is not None else {}
    if lspci_vvv_text is not None:
        acs, acs_source = parse_lspci_vvv(lspci_vvv_text), "lspci"
    elif acs_text is not None:
        acs, acs_source = parse_sysfs_acs(acs_text), "sysfs"
    else:
        acs, acs_source = None, None
    paths = parse_pci_paths(paths_text) if paths_text is not None else None
    if paths is None and acs_source == "lspci":
        # A support bundle: no sysfs paths, the bridges' bus ranges say what is above.
        paths = pci_paths_from_lspci(
            acs,
            [normalise_bus_id(g["pci_bus_id"]) for g in gpus if g.get("pci_bus_id")],
        )
    iommu = parse_iommu(iommu_text) if iommu_text is not None else None
    cmdline = parse_cmdline(cmdline_text)
    out_gpus, warnings = [], []
    for gpu in gpus:
        bus = normalise_bus_id(gpu["pci_bus_id"]) if gpu.get("pci_bus_id") else None
        entry = {"index": gpu["index"], "pci_bus_id": bus}
        row = query.get(gpu["index"], {})
        for key in (
            "pcie",
            "ecc_mode",
            "ecc_uncorrected_volatile",
            "retired_pages_pending",
            "remapped_rows_pending",
            "remapped_rows_failure",
        ):
            entry[key] = row.get(key)
        bridges = None
        if paths is not None and bus in paths:
            bridges = []
            for bridge_bus in paths[bus]:
                known = (acs or {}).get(bridge_bus)
                bridges.append(
                    {
                        "bus_id": bridge_bus,
                        "acs": known["acs"] if known else None,
                        # Not in the listing (or nothing read): its ACS state is unknown.
                        "readable": bool(known and known["readable"]),
                    }
                )
        entry["bridges"] = bridges
        group = ((iommu or {}).get("gpus") or {}).get(bus) or {}
        entry["iommu_group"] = group.get("group")
        entry["iommu_type"] = group.get("type")
        out_gpus.append(entry)
        warnings += _gpu_health_warnings(entry)
    return {
        "gpus": out_gpus,
        "p2p_read": parse_p2p(p2p_text) if p2p_text is not None else None,
        "iommu": {
            "groups": (iommu or {}).get("groups"),
            "cmdline": cmdline,
            "mode": _iommu_mode(cmdline, iommu),
            "cmdline_mode": iommu_from_cmdline(cmdline),
        },
        "acs_source": acs_source,
        "acs_all": (
            {
                b: {"class": d.get("class"), "acs": d["acs"], "readable": d["readable"]}
                for b, d in acs.items()
                if d.get("acs") is not None or not d["readable"]
            }
            if acs is not None
            else None
        ),
        "warnings": warnings,
    }


def _gpu_health_warnings(entry):
    name = f"GPU {entry['index']} ({entry['pci_bus_id']})"
    out = []
    pcie = entry.get("pcie") or {}
    if pcie.get("status") == "degraded":
        out.append(f"{name}: PCIe link degraded, {pcie['why']}")
    if entry.get("ecc_uncorrected_volatile"):
        out.append(
            f"{name}: {entry['ecc_uncorrected_volatile']} uncorrected ECC error(s) since the "
            "driver loaded: drain it, reset the GPU (`nvidia-smi -r -i <index>`) or reboot, and "
            "check the kernel log for Xid 48/63/94/95"
        )
    if entry.get("remapped_rows_failure"):
        out.append(f"{name}: row remapping FAILED: the GPU's memory needs service (RMA)")
    if entry.get("remapped_rows_pending"):
        out.append(
            f"{name}: a row remapping is pending: reset the GPU or reboot to apply it before "
            "serving"
        )
    if entry.get("retired_pages_pending"):
        out.append(f"{name}: page retirement pending: reset the GPU or reboot to apply it")
    return out


def _bridges_between(paths_a, paths_b):
    common = 0
    for first, second in zip(paths_a, paths_b, strict=False):
        if first != second:
            break
        common += 1
    return paths_a[common:] + [b for b in paths_b[common:] if b not in paths_a[common:]]


def _pcie_pairs(facts, wanted):
    matrix = ((facts.get("topology") or {}).get("matrix")) or {}
    pairs = []
    for i, first in enumerate(wanted):
        for second in wanted[i + 1 :]:
            code = matrix.get(f"GPU{first}", {}).get(f"GPU{second}")
            if code is None or link_class(code) != "nvlink":
                pairs.append((first, second))
    return pairs


def _p2p_warning(where, p2p, pairs):
    if not p2p:
        return []
    bad = []
    for a, b in pairs:
        code = p2p["matrix"].get(f"GPU{a}", {}).get(f"GPU{b}")
        if code not in ("OK", None):
            bad.append(f"GPU{a}<->GPU{b} {code}")
    if not bad:
        return []
    return [
        f"{where}: the driver reports PCIe peer-to-peer reads not OK ({', '.join(bad)}; "
        "CNS chipset / GNS GPU / TNS topology not supported, DR disabled by regkey): NCCL "
        "falls back to host memory, and if it hangs at start set NCCL_P2P_DISABLE=1 in the "
        "model's environment; CNS/TNS on a server board usually means ACS or the IOMMU: " + ACS_FIX
    ]


def _acs_findings(fabric, by_index, pairs):
    """({bridge: [redirect bits on]}, {bridge: [other ACS control bits on]},
    {bridges whose ACS state is unknown})."""
    redirect, enabled, unknown = {}, {}, set()

    def look(bus, readable, acs):
        if not readable:
            unknown.add(bus)
            return
        redirected = [n for n in ACS_REDIRECT_BITS if (acs or {}).get(n)]
        other = [n for n in ACS_BITS if (acs or {}).get(n)]
        if redirected:
            redirect[bus] = redirected
        elif other:
            enabled[bus] = other

    if any(g.get("bridges") is not None for g in by_index.values()):
        for a, b in pairs:
            ga, gb = by_index.get(a, {}), by_index.get(b, {})
            bridges = {
                x["bus_id"]: x for x in (ga.get("bridges") or []) + (gb.get("bridges") or [])
            }
            chain = _bridges_between(
                [x["bus_id"] for x in ga.get("bridges") or []],
                [x["bus_id"] for x in gb.get("bridges") or []],
            )
            for bus in chain:
                look(bus, bridges[bus].get("readable"), bridges[bus].get("acs"))
    else:
        for bus, dev in (fabric.get("acs_all") or {}).items():
            if not dev.get("class") or "bridge" in dev["class"].lower():
                look(bus, dev.get("readable"), dev.get("acs"))
    return redirect, enabled, unknown


def _acs_warnings(where, fabric, by_index, pairs):
    if fabric.get("acs_source") is None:
        return [
            (
                f"{where}: ACS on the PCIe bridges was not read (neither lspci -vvv nor sysfs "
                "config space): if NCCL hangs at start, look there first"
            )
        ]
    redirect, enabled, unknown = _acs_findings(fabric, by_index, pairs)
    out = []
    if redirect:
        listed = ", ".join(f"{bus} ({'+ '.join(bits)}+)" for bus, bits in sorted(redirect.items()))
        out.append(
            f"{where}: ACS redirect is on at PCIe bridge(s) {listed}: peer-to-peer traffic between "
            "the GPUs is forced up to the root complex/IOMMU and NCCL can hang at start "
            f"(NVIDIA/nccl#2079); fix: {ACS_FIX}"
        )
    if enabled:
        listed = ", ".join(f"{bus} ({'+ '.join(bits)}+)" for bus, bits in sorted(enabled.items()))
        out.append(
            f"{where}: ACS is enabled at PCIe bridge(s) {listed} above the GPUs (NCCL's "
            "troubleshooting guide reads 'ACSCtl: SrcValid+' as ACS enabled): peer-to-peer "
            "traffic may be sent up to the root complex, slow or a hang at NCCL start; "
            f"fix: {ACS_FIX}"
        )
    if unknown:
        out.append(
            f"{where}: the ACS state of bridge(s) {', '.join(sorted(unknown))} could not be read "
            "(lspci without root prints 'Capabilities: <access denied>'): run gpu_facts as root "
            "to tell whether ACS redirect is on"
        )
    return out


def fabric_warnings(facts, gpu_indices, tensor_parallel_size):
    """Warnings, each with the fix, for a model on these GPUs at this tensor parallel size.

    Health problems of the model's GPUs (degraded link, ECC, remapping) always;
    with tensor parallel > 1 over PCIe: ACS redirect bits on the bridges between
    its GPUs, P2P status not OK, an IOMMU translating peer-to-peer DMA, and ACS
    state that could not be read.
    """
    fabric = (facts or {}).get("fabric") or {}
    wanted = [int(i) for i in gpu_indices or []]
    by_index = {g["index"]: g for g in fabric.get("gpus") or []}
    warnings = []
    for index in wanted:
        if index in by_index:
            warnings += _gpu_health_warnings(by_index[index])
    tp = int(tensor_parallel_size or 1)
    pairs = _pcie_pairs(facts, wanted) if tp > 1 and fabric else []
    if not pairs:
        return warnings
    where = f"tensor parallel {tp} on GPUs {','.join(str(i) for i in wanted)}"
    warnings += _p2p_warning(where, fabric.get("p2p_read"), pairs)
    warnings += _acs_warnings(where, fabric, by_index, pairs)
    warnings += _iommu_warnings(where, fabric, by_index, wanted)
    return warnings


def _iommu_warnings(where, fabric, by_index, wanted):
    """The IOMMU warning: from the GPUs' iommu group types when read, else the command line."""
    iommu = fabric.get("iommu") or {}
    types = {i: (by_index.get(i) or {}).get("iommu_type") for i in wanted}
    translated = [f"GPU{i}" for i, kind in types.items() if kind in ("DMA", "DMA-FQ")]
    if translated:
        text = (
            f"{where}: the IOMMU translates DMA for {', '.join(translated)} (iommu group type "
            f"DMA/DMA-FQ; kernel command line {iommu.get('cmdline') or '{}'}): peer-to-peer "
            f"transfers then go through the IOMMU, slow or blocked; fix: {IOMMU_FIX}"
        )
        return [text]
    if not any(types.values()) and iommu.get("cmdline_mode") == "on":
        # A support bundle: no iommu groups read, the kernel command line turns it on.
        stated = " ".join(
            f"{k}={v}" for k, v in sorted((iommu.get("cmdline") or {}).items()) if "iommu" in k
        )
        text = (
            f"{where}: the kernel command line turns the IOMMU on ({stated}) without "
            "pass-through: peer-to-peer transfers are translated by the IOMMU, slow or blocked "
            f"(the iommu groups were not read to confirm); fix: {IOMMU_FIX}"
        )
        return [text]
    return []
