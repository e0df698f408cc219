# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Parse what nvidia-smi, the kernel and the PCI bus say about NVIDIA GPUs.

Plain functions that take text, and a `Host` seam (run a command, read a named
input) so pytest and the lab drive the very same code with captured outputs.
Runs on target hosts: standard library only.

Units: every memory figure returned is in BYTES (nvidia-smi reports MiB).

Whatever cannot be parsed raises GpuFactsError naming the text and the format
that was wanted: unfamiliar text is an error, never a silent zero.
"""

from __future__ import annotations

import json
import os
import re
import stat
import xml.etree.ElementTree as ET

MIB = 1024 * 1024

# Fields asked of `nvidia-smi --query-gpu`, in this order.
QUERY_GPU_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "memory.total",
    "memory.used",
    "memory.free",
    "compute_cap",
    "persistence_mode",
    "driver_version",
)
QUERY_APPS_FIELDS = ("pid", "used_memory", "gpu_uuid")

PROC_VERSION_PATH = "/proc/driver/nvidia/version"
PROC_GPUS_DIR = "/proc/driver/nvidia/gpus"
SYSFS_PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA_PCI_VENDOR = "10de"
# PCI classes counted as GPUs, as `lspci -d 10de: -n` prints them:
# 0300 VGA compatible controller, 0302 3D controller.
GPU_PCI_CLASSES = ("0300", "0302")
# Character device majors: 195 is the NVIDIA driver's fixed major
# (nvidiactl is minor 255); nvidia-uvm's major is dynamic.
NVIDIA_MAJOR = 195

# Link classes of `nvidia-smi topo -m`, best first. NV# (a bonded set of #
# NVLinks) is ranked by its count; the rest are PCIe paths.
PCIE_LINK_RANK = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}
LINK_LEGEND = {
    "NV#": "bonded set of # NVLinks",
    "PIX": "at most a single PCIe bridge",
    "PXB": "multiple PCIe bridges, no host bridge",
    "PHB": "a PCIe host bridge (the CPU)",
    "NODE": "PCIe and the interconnect between host bridges of one NUMA node",
    "SYS": "PCIe and the SMP interconnect between NUMA nodes",
}

# Open kernel modules exist for Turing (7.5) and newer; Blackwell (10.x, 12.x)
# works ONLY with them (the proprietary module leaves "No devices were found").
OPEN_MIN_CC = (7, 5)
OPEN_ONLY_MIN_CC = (10, 0)

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_UNIT_RE = re.compile(r"^(-?[0-9.]+)\s*([A-Za-z%/]+)?$")
_HEADER_UNIT_RE = re.compile(r"\s*\[[^\]]*\]\s*$")
_NV_RE = re.compile(r"^NV(\d+)$")
# The kernel module's banner, as /proc/driver/nvidia/version prints it
# ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release
# Build ...") and as the kernel log does when it loads ("[    7.03] NVRM: loading
# NVIDIA UNIX x86_64 Kernel Module  550.54.14 ..."), with or without timestamps
# or a syslog prefix.
_NVRM_RE = re.compile(
    r"NVRM(?: version)?:\s+(?:loading\s+)?NVIDIA UNIX\s+(?P<open>Open\s+)?(?:\S+\s+)?"
    r"Kernel Module(?:\s+for\s+\S+)?\s+(?P<version>\d+(?:\.\d+)+)"
)
_BUS_ID_RE = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
# nvidia-smi names a GPU it cannot open, on stdout or stderr, e.g.
# "Unable to determine the device handle for GPU0000:0B:00.0: Unknown Error".
_LOST_RE = re.compile(
    r"Unable to determine the device handle for (?:GPU|gpu)?\s*"
    r"(?P<bus>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]):?\s*(?P<error>.*)$"
)
_MISMATCH_RE = re.compile(r"Driver/library version mismatch", re.IGNORECASE)
_NVML_LIB_RE = re.compile(r"NVML library version:\s*(\S+)")


class GpuFactsError(Exception):
    """Raised when an output cannot be understood (an unrecognised format)."""


def strip_ansi(text):
    """Remove ANSI escape sequences (real `topo -m` output underlines its header)."""
    return _ANSI_RE.sub("", text or "")


def _na(value):
    return value is None or value.strip() in ("", "N/A", "[N/A]", "[Not Supported]")


def _first_line(text):
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:160]
    return ""


def mib_to_bytes(value):
    """'143771', '143771 MiB' -> 150754820096; N/A -> None."""
    if _na(value):
        return None
    match = _UNIT_RE.match(value.strip())
    if not match:
        raise GpuFactsError(f"expected a MiB figure, found {value!r}")
    number, unit = match.groups()
    if unit not in (None, "MiB"):
        raise GpuFactsError(f"expected a figure in MiB, found {value!r}")
    return int(float(number) * MIB)


def normalise_bus_id(value):
    """'00000000:18:00.0', '18:00.0', '0000:0B:00.0' -> '0000:18:00.0' (lowercase)."""
    text = (value or "").strip()
    match = _BUS_ID_RE.match(text)
    if not match:
        raise GpuFactsError(f"expected a PCI bus id like 0000:18:00.0, found {value!r}")
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{bus.lower()}:{device.lower()}.{function}"


def _csv_rows(text):
    # '#' lines never come from nvidia-smi; they head hand-written fixtures.
    return [
        [cell.strip() for cell in line.split(",")]
        for line in (text or "").splitlines()
        if line.strip() and not line.startswith("#")
    ]


def _persistence(value):
    if _na(value):
        return None
    return value.strip().lower() in ("enabled", "on", "1", "yes")


def parse_compute_capability(value):
    """'12.0' -> (12, 0); None or N/A -> None."""
    if value is None:
        return None
    text = str(value).strip()
    if _na(text):
        return None
    match = re.match(r"^(\d+)\.(\d+)$", text)
    if not match:
        raise GpuFactsError(f"expected a compute capability like '12.0', found {value!r}")
    return int(match.group(1)), int(match.group(2))


def split_smi_errors(text):
    """Separate nvidia-smi's per-GPU error lines from its table.

    Returns (remaining_text, lost) where lost lists
    {"bus_id": "0000:0b:00.0", "error": "Unknown Error"} for each
    "Unable to determine the device handle for GPU..." line.
    """
    kept, lost = [], []
    for line in (text or "").splitlines():
        match = _LOST_RE.search(line)
        if match:
            lost.append(
                {
                    "bus_id": normalise_bus_id(match.group("bus")),
                    "error": match.group("error").strip() or "unknown error",
                }
            )
        else:
            kept.append(line)
    return "\n".join(kept) + ("\n" if kept else ""), lost


def parse_query_gpu(text, fields=QUERY_GPU_FIELDS):
    """Parse `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`.

    Without `noheader` the field names come from the header line (units such as
    `[MiB]` stripped), so a capture asked with other fields in another order
    still parses. Values with units (`143771 MiB`) are accepted too.
    A line that is not a row of the expected width raises GpuFactsError naming
    it (split the per-GPU error lines off first with split_smi_errors).
    Returns a list of per-GPU dicts sorted by index.
    """
    rows = _csv_rows(text)
    if rows and rows[0] and rows[0][0] == "index":
        fields = tuple(_HEADER_UNIT_RE.sub("", cell) for cell in rows[0])
        rows = rows[1:]
    gpus = []
    for row in rows:
        if len(row) != len(fields):
            raise GpuFactsError(
                f"unrecognised line in nvidia-smi --query-gpu output: expected {len(fields)} "
                f"comma-separated fields ({', '.join(fields)}), found {len(row)}: {','.join(row)!r}"
            )
        raw = dict(zip(fields, row, strict=True))
        if not raw["index"].isdigit():
            raise GpuFactsError(
                f"unrecognised line in nvidia-smi --query-gpu output: index {raw['index']!r} "
                f"is not a number in {','.join(row)!r}"
            )
        gpu = {
            "index": int(raw["index"]),
            "name": raw.get("name"),
            "uuid": raw.get("uuid"),
            "pci_bus_id": raw.get("pci.bus_id"),
            "memory_total_bytes": mib_to_bytes(raw.get("memory.total")),
            "memory_used_bytes": mib_to_bytes(raw.get("memory.used")),
            "memory_free_bytes": mib_to_bytes(raw.get("memory.free")),
            "compute_capability": None if _na(raw.get("compute_cap")) else raw["compute_cap"],
            "persistence_mode": _persistence(raw.get("persistence_mode")),
        }
        if not _na(raw.get("driver_version")):
            gpu["driver_version"] = raw["driver_version"]
        gpus.append(gpu)
    return sorted(gpus, key=lambda g: g["index"])


def _xml_text(node, path):
    found = node.find(path)
    if found is None or found.text is None:
        return None
    text = found.text.strip()
    return None if _na(text) else text


def parse_smi_xml(text):
    """Parse `nvidia-smi -q -x`: driver version, highest CUDA, per-GPU details."""
    try:
        root = ET.fromstring(text)  # noqa: S314 - local nvidia-smi output, no entities
    except ET.ParseError as exc:
        raise GpuFactsError(f"nvidia-smi -q -x did not print valid XML: {exc}") from exc
    gpus = []
    for gpu in root.findall("gpu"):
        processes = []
        for proc in gpu.findall("processes/process_info"):
            pid = _xml_text(proc, "pid")
            processes.append(
                {
                    "pid": int(pid) if pid else None,
                    "used_memory_bytes": mib_to_bytes(_xml_text(proc, "used_memory")),
                    "name": _xml_text(proc, "process_name"),
                }
            )
        minor = _xml_text(gpu, "minor_number")
        gpus.append(
            {
                "name": _xml_text(gpu, "product_name"),
                "architecture": _xml_text(gpu, "product_architecture"),
                "uuid": _xml_text(gpu, "uuid"),
                "pci_bus_id": _xml_text(gpu, "pci/pci_bus_id") or gpu.get("id"),
                "minor_number": int(minor) if minor and minor.isdigit() else None,
                "persistence_mode": _persistence(_xml_text(gpu, "persistence_mode")),
                "memory_total_bytes": mib_to_bytes(_xml_text(gpu, "fb_memory_usage/total")),
                "memory_used_bytes": mib_to_bytes(_xml_text(gpu, "fb_memory_usage/used")),
                "memory_free_bytes": mib_to_bytes(_xml_text(gpu, "fb_memory_usage/free")),
                "processes": processes,
            }
        )
    return {
        "driver_version": _xml_text(root, "driver_version"),
        "cuda_version": _xml_text(root, "cuda_version"),
        "attached_gpus": int(_xml_text(root, "attached_gpus") or len(gpus)),
        "gpus": gpus,
    }


def parse_compute_apps(text):
    """Parse `nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid --format=csv,...`.

    Expects `noheader,nounits` (a header line is skipped if present).
    """
    apps = []
    for row in _csv_rows(text):
        if row[0] == "pid":
            continue
        if len(row) != len(QUERY_APPS_FIELDS) or not row[0].isdigit():
            raise GpuFactsError(
                "unrecognised line in nvidia-smi --query-compute-apps output: expected 3 fields "
                f"(pid, used_memory, gpu_uuid), found {','.join(row)!r}"
            )
        apps.append(
            {
                "pid": int(row[0]),
                "used_memory_bytes": mib_to_bytes(row[1]),
                "gpu_uuid": row[2],
            }
        )
    return apps


def link_class(code):
    """'NV18' -> 'nvlink'; 'PIX'..'SYS' -> 'pcie'; 'X' -> 'self'; else 'unknown'."""
    if code == "X":
        return "self"
    if _NV_RE.match(code) or code == "NVB":
        return "nvlink"
    if code in PCIE_LINK_RANK:
        return "pcie"
    return "unknown"


def _link_badness(code):
    """Sort key: larger is worse. NVLink (more links better) < PIX < ... < SYS < unknown."""
    nv = _NV_RE.match(code)
    if nv:
        return (0, -int(nv.group(1)))
    if code == "NVB":
        return (0, 0)
    if code in PCIE_LINK_RANK:
        return (1, PCIE_LINK_RANK[code])
    return (2, 0)


def _topology_table(text, what="nvidia-smi topo -m"):
    """Split `topo -m` / `topo -p2p` text into header cells and body rows (tab-separated)."""
    header, body = None, []
    for line in strip_ansi(text).splitlines():
        if line.strip().startswith("Legend") or (not line.strip() and body):
            break
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split("\t")]
        if header is None:
            if cells[0] == "" and any(c.startswith("GPU") for c in cells):
                header = [c for c in cells if c]
            continue
        body.append(cells)
    if header is None:
        raise GpuFactsError(
            f"{what} printed no header line with GPU columns (unrecognised format; "
            f"first line: {_first_line(text)!r})"
        )
    return header, body


def _link_summary(gpus, matrix):
    pairs = {}
    for i, first in enumerate(gpus):
        for second in gpus[i + 1 :]:
            pairs[f"{first}-{second}"] = matrix.get(first, {}).get(second)
    codes = [c for c in pairs.values() if c]
    if not codes:
        return pairs, "none", None
    worst = max(codes, key=_link_badness)
    interconnect = "nvlink" if all(link_class(c) == "nvlink" for c in codes) else "pcie"
    return pairs, interconnect, worst


def parse_topology(text):
    """Parse `nvidia-smi topo -m` (ANSI escapes allowed).

    Returns the device-to-device matrix, CPU/NUMA affinity per GPU, and a
    summary over GPU pairs: `interconnect` is `nvlink` when every GPU pair is
    linked by NVLink, `pcie` when any pair goes over PCIe, `none` for fewer
    than two GPUs; `worst_link` is the worst pair's code (e.g. `NV18`, `SYS`).
    """
    header, body = _topology_table(text)
    devices = [h for h in header if re.match(r"^(GPU|NIC|mlx|CPU\d)", h) and " " not in h]
    extra_names = header[len(devices) :]
    matrix = {}
    extras = {name: {} for name in ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")}
    for cells in body:
        name, rest = cells[0], cells[1:]
        if len(rest) < len(devices):
            raise GpuFactsError(
                f"topo -m row {name!r} has {len(rest)} cells, wanted {len(devices)}"
            )
        matrix[name] = dict(zip(devices, rest[: len(devices)], strict=True))
        # Trailing cells may be separated by two tabs: drop the empty ones.
        values = [c for c in rest[len(devices) :] if c]
        for column, value in zip(extra_names, values, strict=False):
            if column in extras:
                extras[column][name] = value
    pairs, interconnect, worst = _link_summary([d for d in devices if d.startswith("GPU")], matrix)
    return {
        "devices": devices,
        "matrix": matrix,
        "gpu_pairs": pairs,
        "cpu_affinity": extras["CPU Affinity"],
        "numa_affinity": extras["NUMA Affinity"],
        "gpu_numa_id": extras["GPU NUMA ID"],
        "interconnect": interconnect,
        "worst_link": worst,
        "worst_link_class": link_class(worst) if worst else None,
    }


def kernel_module_flavour(proc_version_text=None, modinfo_license=None):
    """Tell the open kernel module from the proprietary one, and its version.

    Reads the module's banner from /proc/driver/nvidia/version ("NVIDIA UNIX
    Open Kernel Module ..." vs "NVIDIA UNIX x86_64 Kernel Module ...") or from a
    kernel log line ("[   7.03] NVRM: loading NVIDIA UNIX ..."), with or
    without timestamps; `modinfo -F license nvidia` ("Dual MIT/GPL" vs
    "NVIDIA") is the fallback when there is no banner text at all.
    Returns (flavour, version, source) with flavour open|proprietary|unknown.
    Raises GpuFactsError for banner text in an unrecognised format.
    """
    text = proc_version_text or ""
    if text.strip():
        for line in text.splitlines():
            match = _NVRM_RE.search(line)
            if match:
                flavour = "open" if match.group("open") else "proprietary"
                return flavour, match.group("version"), "proc"
        raise GpuFactsError(
            "the NVIDIA kernel module version text is in an unrecognised format: wanted a line "
            "like 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  ...' "
            "(/proc/driver/nvidia/version) or '[ 7.03] NVRM: loading NVIDIA UNIX ... Kernel "
            f"Module  580.95.05 ...' (kernel log), found {_first_line(text)!r}"
        )
    lic = (modinfo_license or "").strip()
    if lic:
        if "MIT" in lic:
            return "open", None, "modinfo"
        if lic == "NVIDIA":
            return "proprietary", None, "modinfo"
    return "unknown", None, None


def default_flavour(compute_capability):
    """Default kernel module flavour for a GPU of this compute capability.

    Open for Turing (7.5) and newer, and the only choice from Blackwell (10.0)
    on; proprietary below 7.5, where the open modules do not run.
    """
    cc = parse_compute_capability(compute_capability)
    if cc is None:
        return "open"
    return "open" if cc >= OPEN_MIN_CC else "proprietary"


def allowed_flavours(compute_capability):
    """Kernel module flavours that can drive a GPU of this compute capability."""
    cc = parse_compute_capability(compute_capability)
    if cc is None:
        return ["open", "proprietary"]
    if cc >= OPEN_ONLY_MIN_CC:
        return ["open"]
    if cc >= OPEN_MIN_CC:
        return ["open", "proprietary"]
    return ["proprietary"]


# One PCI device per line, in the layouts this module accepts:
#   lspci -n      0000:18:00.0 0302: 10de:2bb5 (rev a1)    (domain optional)
#   lspci -nn     18:00.0 3D controller [0302]: NVIDIA Corporation ... [10de:2bb5] (rev a1)
#   sysfs         0000:00:06.0 0x030200 0x10de:0x2335     (read_sysfs_pci, captures)
_PCI_LINE_RES = (
    re.compile(
        r"^(?P<slot>\S+)\s+(?:Class\s+)?(?P<klass>[0-9a-fA-F]{4}):\s+"
        r"(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\b"
    ),
    re.compile(
        r"^(?P<slot>\S+)\s+.*\[(?P<klass>[0-9a-fA-F]{4})\]:\s+.*"
        r"\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]"
    ),
    re.compile(
        r"^(?P<slot>\S+)\s+0x(?P<klass>[0-9a-fA-F]{4})[0-9a-fA-F]{2}\s+"
        r"0x(?P<vendor>[0-9a-fA-F]{4}):0x(?P<device>[0-9a-fA-F]{4})$"
    ),
)


def parse_lspci_n(text):
    """NVIDIA VGA/3D controllers in a PCI device listing, as normalised bus ids.

    Accepts `lspci -n`, `lspci -nn` and the sysfs layout of read_sysfs_pci
    (`0000:00:06.0 0x030200 0x10de:0x2335`). Blank and '#' lines are skipped;
    any other line raises GpuFactsError (an `lspci -vvv` dump or a list of
    bare slots would otherwise count as zero GPUs).
    """
    found = []
    for line in (text or "").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        for pattern in _PCI_LINE_RES:
            match = pattern.match(stripped)
            if match and _BUS_ID_RE.match(match.group("slot")):
                break
        else:
            hint = (
                " (this looks like `lspci -vvv` output)"
                if line[:1].isspace() or re.search(r"\s(bridge|controller):", line)
                else ""
            )
            raise GpuFactsError(
                f"unrecognised line in the PCI device listing{hint}: {stripped[:120]!r}; wanted "
                "`lspci -n` lines ('0000:18:00.0 0302: 10de:2bb5'), `lspci -nn` lines, or sysfs "
                "lines ('0000:00:06.0 0x030200 0x10de:0x2335')"
            )
        if (
            match.group("vendor").lower() == NVIDIA_PCI_VENDOR
            and match.group("klass").lower() in GPU_PCI_CLASSES
        ):
            found.append(normalise_bus_id(match.group("slot")))
    return found


def read_sysfs_pci(root=SYSFS_PCI_DEVICES):
    """Render /sys/bus/pci/devices in the sysfs layout parse_lspci_n reads.

    Returns None when the directory cannot be read.
    """
    try:
        slots = sorted(os.listdir(root))
    except OSError:
        return None
    lines = []
    for slot in slots:
        values = {}
        try:
            for name in ("class", "vendor", "device"):
                with open(os.path.join(root, slot, name)) as handle:
                    values[name] = handle.read().strip().lower()
        except OSError:
            continue
        lines.append(f"{slot} {values['class']} {values['vendor']}:{values['device']}")
    return "\n".join(lines) + ("\n" if lines else "")


def parse_proc_gpus(text):
    """Parse /proc/driver/nvidia/gpus/*/information (concatenated).

    Returns {bus_id: {"model", "minor", "uuid"}} for each GPU the kernel module
    drives. Entries are headed by `== <path>` lines (as read_proc_gpus writes
    them) or simply follow each other; each must carry a `Bus Location`.
    """
    gpus, current = {}, {}

    def flush():
        if not current:
            return
        bus = current.get("Bus Location")
        if not bus:
            raise GpuFactsError(
                "unrecognised /proc/driver/nvidia/gpus information: an entry has no "
                f"'Bus Location' line ({sorted(current)})"
            )
        minor = current.get("Device Minor", "")
        gpus[normalise_bus_id(bus)] = {
            "model": current.get("Model"),
            "minor": int(minor) if minor.isdigit() else None,
            "uuid": current.get("GPU UUID"),
        }
        current.clear()

    for line in (text or "").splitlines():
        if line.startswith("=="):
            flush()
            continue
        if not line.strip() or line.startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise GpuFactsError(
                f"unrecognised line in /proc/driver/nvidia/gpus information: {line.strip()!r}"
            )
        key = key.strip()
        if key == "Model" and current:
            flush()
        current[key] = value.strip()
    flush()
    return gpus


def read_proc_gpus(root=PROC_GPUS_DIR):
    """The information files of the GPUs the kernel module drives, or None."""
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return None
    parts = []
    for entry in entries:
        path = os.path.join(root, entry, "information")
        try:
            with open(path) as handle:
                parts.append(f"== {path}\n{handle.read()}")
        except OSError:
            continue
    return "".join(parts)


_DEV_LS_RE = re.compile(r"^c\S*\s+\d+\s+\S+\s+\S+\s+(\d+),\s*(\d+)\s+.*\s(\S+)$")
_DEV_PLAIN_RE = re.compile(r"^c\s+(\d+):(\d+)\s+(/dev/\S+)$")


def parse_device_nodes(text):
    """Character devices from `ls -la /dev/nvidia* /dev/nvidia-caps` (or read_device_nodes) text.

    Returns {"/dev/nvidia0": "195:0", ...}; names under a `/dev/nvidia-caps:`
    heading get that directory. Directory entries and totals are skipped; a
    line that starts like a character device but does not parse raises.
    """
    nodes, folder = {}, "/dev"
    for line in (text or "").splitlines():
        stripped = line.strip()
        heading = re.match(r"^(/\S+):$", stripped)
        if heading:
            folder = heading.group(1)
            continue
        match = _DEV_PLAIN_RE.match(stripped) or _DEV_LS_RE.match(stripped)
        if match:
            major, minor, path = match.groups()
            if not path.startswith("/"):
                path = f"{folder}/{path}"
            nodes[path] = f"{int(major)}:{int(minor)}"
            continue
        if stripped.startswith("c"):
            raise GpuFactsError(f"unrecognised character device line: {stripped!r}")
    return nodes


def read_device_nodes(dev_dir="/dev"):
    """Render the NVIDIA character devices under dev_dir as `c MAJ:MIN PATH` lines."""
    lines = []
    candidates = []
    try:
        candidates = [
            os.path.join(dev_dir, n) for n in os.listdir(dev_dir) if n.startswith("nvidia")
        ]
        caps = os.path.join(dev_dir, "nvidia-caps")
        if os.path.isdir(caps):
            candidates += [os.path.join(caps, n) for n in os.listdir(caps)]
    except OSError:
        return None
    for path in sorted(candidates):
        try:
            info = os.stat(path)
        except OSError:
            continue
        if stat.S_ISCHR(info.st_mode):
            shown = "/dev/" + os.path.relpath(path, dev_dir)
            lines.append(f"c {os.major(info.st_rdev)}:{os.minor(info.st_rdev)} {shown}")
    return "\n".join(lines) + ("\n" if lines else "")


# Run by read_cuda_init with the target's Python: loads the driver library and
# asks it to initialise CUDA, nothing else (no framework, no context).
CUDA_INIT_SCRIPT = r"""
import ctypes, json
out = {"library": "libcuda.so.1"}
try:
    lib = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    out.update(loaded=False, error=str(exc))
else:
    out["loaded"] = True
    version = ctypes.c_int(0)
    out["driver_version_rc"] = lib.cuDriverGetVersion(ctypes.byref(version))
    out["driver_cuda_version"] = version.value
    rc = lib.cuInit(0)
    out["init_rc"] = rc
    name = ctypes.c_char_p()
    if lib.cuGetErrorName(rc, ctypes.byref(name)) == 0 and name.value:
        out["init_error"] = name.value.decode()
    if rc == 0:
        count = ctypes.c_int(-1)
        out["count_rc"] = lib.cuDeviceGetCount(ctypes.byref(count))
        out["device_count"] = count.value
print(json.dumps(out))
"""


def parse_cuda_init(text):
    """Interpret CUDA_INIT_SCRIPT's JSON line: can CUDA initialise here?

    Returns {"checked": True, "library_loaded", "initialised", "device_count",
    "error", "driver_cuda_version"} (driver_cuda_version like "13.0").
    """
    try:
        raw = json.loads((text or "").strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise GpuFactsError(
            "the CUDA initialisation check printed no JSON line (unrecognised): "
            f"{_first_line(text)!r}"
        ) from exc
    version = raw.get("driver_cuda_version") or 0
    result = {
        "checked": True,
        "library_loaded": bool(raw.get("loaded")),
        "initialised": raw.get("init_rc") == 0 and raw.get("count_rc") == 0,
        "device_count": raw.get("device_count") if raw.get("count_rc") == 0 else None,
        "driver_cuda_version": f"{version // 1000}.{(version % 1000) // 10}" if version else None,
        "error": None,
    }
    if not result["library_loaded"]:
        result["error"] = f"cannot load {raw.get('library')}: {raw.get('error')}"
    elif raw.get("init_rc") != 0:
        result["error"] = (
            f"cuInit failed: {raw.get('init_error') or 'error'} ({raw.get('init_rc')})"
        )
    elif raw.get("count_rc") != 0:
        result["error"] = f"cuDeviceGetCount failed ({raw.get('count_rc')})"
    return result


def empty_facts(msg, nvidia_smi=None):
    """Facts for a host where nvidia-smi is absent or cannot talk to a driver."""
    return {
        "present": False,
        "nvidia_smi": nvidia_smi,
        "msg": msg,
        "gpu_count": 0,
        "gpus": [],
        "driver_version": None,
        "cuda_version": None,
        "kernel_module": {"flavour": "unknown", "version": None, "source": None},
        "driver_loaded": False,
        "topology": None,
        "processes": [],
        "pci_gpu_count": None,
        "pci_gpu_slots": [],
        "driver_gpu_slots": None,
        "expected_gpu_slots": [],
        "lost_gpus": [],
        "problems": [],
        "device_nodes": None,
        "cuda": {"checked": False},
        "container": None,
        "fabric": None,
    }


def _merge_gpus(query_gpus, xml_info, proc_gpus):
    by_uuid = {g["uuid"]: g for g in (xml_info or {}).get("gpus", []) if g.get("uuid")}
    merged = []
    for gpu in query_gpus:
        extra = by_uuid.get(gpu["uuid"], {})
        item = dict(gpu)
        item.pop("driver_version", None)
        for key in (
            "memory_total_bytes",
            "memory_used_bytes",
            "memory_free_bytes",
            "persistence_mode",
        ):
            if item.get(key) is None and extra.get(key) is not None:
                item[key] = extra[key]
        item["architecture"] = extra.get("architecture")
        minor = extra.get("minor_number")
        if minor is None and item.get("pci_bus_id"):
            minor = (proc_gpus or {}).get(normalise_bus_id(item["pci_bus_id"]), {}).get("minor")
        item["minor_number"] = minor
        merged.append(item)
    return merged


def _smi_said(out, err):
    return " ".join(((out or "") + " " + (err or "")).split())


def _failure_problem(kmod_version, rc, out, err, lost, missing, listed_any):
    said = _smi_said(out, err)
    text = (
        f"the NVIDIA kernel module {kmod_version} is loaded but nvidia-smi failed (rc={rc}): {said}"
    )
    if _MISMATCH_RE.search(said):
        lib = _NVML_LIB_RE.search(said)
        text += (
            f". The userspace driver (NVML {lib.group(1) if lib else 'of another version'}) does "
            f"not match the kernel module {kmod_version}: install the userspace of exactly "
            f"{kmod_version} (in an LXC container: nvidia_driver_mode=container), or on a host "
            "reboot so the module of the installed driver loads"
        )
    if lost:
        text += ". GPUs nvidia-smi cannot open: " + ", ".join(
            f"{g['bus_id']} ({g['error']})" for g in lost
        )
    if missing and (lost or listed_any):
        text += ". NVIDIA GPUs on the PCI bus that nvidia-smi does not list: " + ", ".join(missing)
    elif missing:
        text += ". nvidia-smi reaches none of the NVIDIA GPUs on the PCI bus: " + ", ".join(missing)
    return text


def _lost_problem(listed, expected, lost, missing):
    parts = [
        (
            f"nvidia-smi lists {listed} GPU(s) but {len(expected)} NVIDIA GPU(s) are on the PCI "
            "bus and in the driver"
        )
    ]
    if lost:
        parts.append("it cannot open " + ", ".join(f"{g['bus_id']} ({g['error']})" for g in lost))
    if missing:
        parts.append("missing: " + ", ".join(missing))
    parts.append(
        "a GPU that fell off the bus (Xid 79 in the kernel log) needs a reset or a reboot; "
        "do not deploy on the GPUs that remain"
    )
    return "; ".join(parts)


def collect(
    run_command,
    nvidia_smi="nvidia-smi",
    proc_version_text=None,
    modinfo_license=None,
    lspci_text=None,
    proc_gpus_text=None,
    expected_bus_ids=None,
):
    """Gather GPU facts by calling nvidia-smi through `run_command`.

    run_command(argv) -> (rc, stdout, stderr), as AnsibleModule.run_command.
    nvidia_smi is the path of the binary, or None when it is absent.
    proc_version_text: /proc/driver/nvidia/version (or None): the loaded kernel
    module's flavour and version are read from it on every path.
    modinfo_license: `modinfo -F license nvidia` output (fallback for the flavour).
    lspci_text: a PCI device listing (see parse_lspci_n).
    proc_gpus_text: /proc/driver/nvidia/gpus/*/information (the driver's own list).
    expected_bus_ids: the GPUs this machine must see (default: every NVIDIA GPU
    on the PCI bus and in the driver's list).

    Never raises for an absent or failing nvidia-smi: returns facts with
    `present: false` and a `msg` saying why. A driver that is loaded while
    nvidia-smi fails, or lists fewer GPUs than expected, is put in `problems`
    naming the bus ids (the caller fails on it; it is never a zero to fall
    back from). Raises GpuFactsError for text in an unrecognised format.
    """
    flavour, kmod_version, source = kernel_module_flavour(proc_version_text, modinfo_license)
    driver_loaded = source == "proc"
    pci_slots = parse_lspci_n(lspci_text) if lspci_text is not None else None
    proc_gpus = parse_proc_gpus(proc_gpus_text) if proc_gpus_text is not None else None
    if expected_bus_ids:
        expected = sorted({normalise_bus_id(b) for b in expected_bus_ids})
    else:
        expected = sorted(set(pci_slots or []) | set(proc_gpus or {}))

    if not nvidia_smi:
        msg = "nvidia-smi not found: no NVIDIA driver userspace installed"
        if driver_loaded:
            msg += (
                f" (the kernel module {flavour} {kmod_version} is loaded: install the userspace "
                "of exactly that version)"
            )
        facts = empty_facts(msg)
    else:
        facts = _ask_nvidia_smi(run_command, nvidia_smi, proc_gpus)
        _judge(facts, expected, driver_loaded, kmod_version)
    facts["kernel_module"] = {"flavour": flavour, "version": kmod_version, "source": source}
    facts["driver_loaded"] = driver_loaded
    facts["pci_gpu_slots"] = pci_slots or []
    facts["pci_gpu_count"] = None if pci_slots is None else len(pci_slots)
    facts["driver_gpu_slots"] = None if proc_gpus is None else sorted(proc_gpus)
    facts["expected_gpu_slots"] = expected
    return facts


def _processes(run_command, nvidia_smi, query_gpus, xml_info):
    uuid_index = {g["uuid"]: g["index"] for g in query_gpus}
    rc, out, _err = run_command(
        [
            nvidia_smi,
            "--query-compute-apps=" + ",".join(QUERY_APPS_FIELDS),
            "--format=csv,noheader,nounits",
        ]
    )
    if rc == 0:
        processes = parse_compute_apps(split_smi_errors(out)[0])
    else:
        processes = [
            {
                "pid": proc["pid"],
                "used_memory_bytes": proc["used_memory_bytes"],
                "gpu_uuid": gpu["uuid"],
            }
            for gpu in (xml_info or {}).get("gpus", [])
            for proc in gpu["processes"]
        ]
    for proc in processes:
        proc["gpu_index"] = uuid_index.get(proc["gpu_uuid"])
    return processes


def _ask_nvidia_smi(run_command, nvidia_smi, proc_gpus):
    """Facts from nvidia-smi's answers; on failure the facts say so (nvidia_smi_rc)."""
    query = [
        nvidia_smi,
        "--query-gpu=" + ",".join(QUERY_GPU_FIELDS),
        "--format=csv,noheader,nounits",
    ]
    rc, out, err = run_command(query)
    table, lost = split_smi_errors(out)
    lost += split_smi_errors(err)[1]
    if rc != 0:
        facts = empty_facts(f"nvidia-smi failed (rc={rc}): {_smi_said(out, err)}", nvidia_smi)
        facts.update(nvidia_smi_rc=rc, nvidia_smi_said=(out, err), lost_gpus=lost)
        try:  # the GPUs it did list before failing, if any
            facts["gpus"] = parse_query_gpu(table)
        except GpuFactsError:
            facts["gpus"] = []
        return facts
    query_gpus = parse_query_gpu(table)
    rc, out, _err = run_command([nvidia_smi, "-q", "-x"])
    xml_info = parse_smi_xml(out) if rc == 0 and out.strip() else None
    rc, out, _err = run_command([nvidia_smi, "topo", "-m"])
    topology = parse_topology(out) if rc == 0 and out.strip() else None
    driver_version = (xml_info or {}).get("driver_version")
    if not driver_version and query_gpus:
        driver_version = query_gpus[0].get("driver_version")
    gpus = _merge_gpus(query_gpus, xml_info, proc_gpus)
    facts = empty_facts(f"{len(gpus)} NVIDIA GPU(s) found", nvidia_smi)
    facts.update(
        present=True,
        gpu_count=len(gpus),
        gpus=gpus,
        driver_version=driver_version,
        cuda_version=(xml_info or {}).get("cuda_version"),
        topology=topology,
        processes=_processes(run_command, nvidia_smi, query_gpus, xml_info),
        lost_gpus=lost,
    )
    return facts


def _judge(facts, expected, driver_loaded, kmod_version):
    """Put what stops the GPUs from serving into facts["problems"], naming bus ids."""
    listed = {normalise_bus_id(g["pci_bus_id"]) for g in facts["gpus"] if g.get("pci_bus_id")}
    lost = facts["lost_gpus"]
    lost_ids = {g["bus_id"] for g in lost}
    missing = [b for b in expected if b not in listed and b not in lost_ids]
    if not facts["present"]:
        # A failing nvidia-smi matters when the driver is loaded (else: not installed yet).
        facts["gpus"] = []
        if driver_loaded:
            out, err = facts.pop("nvidia_smi_said")
            facts["problems"].append(
                _failure_problem(
                    kmod_version, facts["nvidia_smi_rc"], out, err, lost, missing, bool(listed)
                )
            )
        else:
            facts.pop("nvidia_smi_said", None)
        return
    if lost or missing:
        facts["problems"].append(_lost_problem(len(facts["gpus"]), expected, lost, missing))
    version = facts["driver_version"]
    if driver_loaded and version and kmod_version and version != kmod_version:
        facts["problems"].append(
            f"nvidia-smi reports driver {version} but the loaded kernel module is "
            f"{kmod_version}: install the userspace of exactly {kmod_version}"
        )


def gpu_minors(facts):
    """{gpu index: device minor} for the GPUs nvidia-smi lists (index when unknown)."""
    return {
        g["index"]: g.get("minor_number") if g.get("minor_number") is not None else g["index"]
        for g in facts.get("gpus") or []
    }


LXC_FIX = (
    "in the LXC container's config on the host (e.g. /etc/pve/lxc/<id>.conf): "
    "`lxc.cgroup2.devices.allow: c 195:* rwm` and `lxc.cgroup2.devices.allow: c <major>:* rwm` "
    "for nvidia-uvm's major (`ls -l /dev/nvidia-uvm` on the host), and a "
    "`lxc.mount.entry: /dev/<node> dev/<node> none bind,optional,create=file` line for each of "
    "nvidiactl, nvidia0..N, nvidia-uvm and nvidia-uvm-tools; then restart the container"
)
UVM_FIX = (
    "on the host, load nvidia-uvm and create its nodes (`modprobe nvidia-uvm && "
    "nvidia-modprobe -u -c=0`, at every boot: e.g. a line `nvidia-uvm` in "
    "/etc/modules-load.d/nvidia.conf)"
)


def runtime_problems(facts):
    """What stops CUDA from running here, each with its host-side fix.

    Looks at the device nodes (/dev/nvidiactl, /dev/nvidiaN per GPU,
    /dev/nvidia-uvm, /dev/nvidia-uvm-tools) and the CUDA initialisation check,
    when they were read. Missing uvm nodes count only when CUDA failed to
    initialise or inside a container: on a host, the first CUDA program
    creates them through nvidia-modprobe.
    """
    problems = []
    nodes = facts.get("device_nodes")
    cuda = facts.get("cuda") or {}
    if not facts.get("driver_loaded") or nodes is None:
        return problems
    container = facts.get("container")
    wanted = ["/dev/nvidiactl"] + [f"/dev/nvidia{m}" for m in sorted(gpu_minors(facts).values())]
    missing = [n for n in wanted if n not in nodes]
    uvm_missing = [n for n in ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools") if n not in nodes]
    if missing:
        where = LXC_FIX if container else "on the host: `nvidia-modprobe -c=<minor>` for each GPU"
        problems.append(f"device nodes missing: {', '.join(missing)}; fix {where}")
    cuda_failed = cuda.get("checked") and not cuda.get("initialised")
    if uvm_missing and (cuda_failed or container):
        fix = UVM_FIX + (f", and pass the nodes in: {LXC_FIX}" if container else "")
        problems.append(
            f"device nodes missing: {', '.join(uvm_missing)} (CUDA cannot initialise without "
            f"nvidia-uvm); fix {fix}"
        )
    if cuda_failed:
        text = f"CUDA cannot initialise: {cuda.get('error')}"
        if not cuda.get("library_loaded"):
            text += (
                "; install the userspace driver of exactly the kernel module's version "
                f"({(facts.get('kernel_module') or {}).get('version')})"
            )
        elif not uvm_missing and not missing:
            text += "; compare `dmesg | grep -i nvrm` on the host with the error"
        problems.append(text)
    elif cuda.get("checked") and cuda.get("device_count") != facts.get("gpu_count"):
        problems.append(
            f"CUDA sees {cuda.get('device_count')} device(s), nvidia-smi lists "
            f"{facts.get('gpu_count')}: CUDA_VISIBLE_DEVICES or the cgroup device rules hide some"
        )
    return problems


def unexplained_memory(facts, gpu_indices, threshold_bytes):
    """GPUs among gpu_indices with more memory in use than visible processes hold.

    Inside an LXC container nvidia-smi lists no process of another namespace,
    yet shows its memory as used. Returns one finding per GPU whose used memory
    exceeds the listed processes' sum by more than threshold_bytes:
    {"gpu_index", "pci_bus_id", "used_bytes", "explained_bytes",
    "unexplained_bytes", "msg"}. A GPU index the facts do not list is a finding
    too (its memory cannot be checked).
    """
    by_index = {g["index"]: g for g in facts.get("gpus") or []}
    findings = []
    for index in gpu_indices or []:
        gpu = by_index.get(int(index))
        if gpu is None:
            findings.append(
                {
                    "gpu_index": int(index),
                    "pci_bus_id": None,
                    "used_bytes": None,
                    "explained_bytes": None,
                    "unexplained_bytes": None,
                    "msg": f"GPU {index} is not listed by nvidia-smi: its memory cannot be checked",
                }
            )
            continue
        used = gpu.get("memory_used_bytes") or 0
        explained = sum(
            p.get("used_memory_bytes") or 0
            for p in facts.get("processes") or []
            if p.get("gpu_index") == gpu["index"]
        )
        unexplained = used - explained
        if unexplained > threshold_bytes:
            findings.append(
                {
                    "gpu_index": gpu["index"],
                    "pci_bus_id": gpu.get("pci_bus_id"),
                    "used_bytes": used,
                    "explained_bytes": explained,
                    "unexplained_bytes": unexplained,
                    "msg": (
                        f"GPU {gpu['index']} ({gpu.get('pci_bus_id')}) has {unexplained} bytes "
                        f"({unexplained / 2**30:.1f} GiB) in use that no visible process holds "
                        f"(used {used}, listed processes {explained}, threshold "
                        f"{threshold_bytes}): "
                        "a process outside this container (another LXC container or the host) "
                        "holds it"
                    ),
                }
            )
    return findings


def memory_snapshot(run_command, nvidia_smi="nvidia-smi"):
    """Fresh per-GPU used memory and processes (what unexplained_memory reads).

    For the cutover: read again after blue stopped, right before green starts.
    Raises GpuFactsError when nvidia-smi fails.
    """
    rc, out, err = run_command(
        [nvidia_smi, "--query-gpu=" + ",".join(QUERY_GPU_FIELDS), "--format=csv,noheader,nounits"]
    )
    if rc != 0:
        raise GpuFactsError(f"nvidia-smi failed (rc={rc}): {_smi_said(out, err)}")
    gpus = parse_query_gpu(split_smi_errors(out)[0])
    rc, out, err = run_command(
        [
            nvidia_smi,
            "--query-compute-apps=" + ",".join(QUERY_APPS_FIELDS),
            "--format=csv,noheader,nounits",
        ]
    )
    if rc != 0:
        raise GpuFactsError(
            f"nvidia-smi --query-compute-apps failed (rc={rc}): {_smi_said(out, err)}"
        )
    uuid_index = {g["uuid"]: g["index"] for g in gpus}
    processes = parse_compute_apps(split_smi_errors(out)[0])
    for proc in processes:
        proc["gpu_index"] = uuid_index.get(proc["gpu_uuid"])
    return {"gpus": gpus, "processes": processes}


def collect_from_fixture(fixture_dir, expected_bus_ids=None):
    """All GPU facts from a directory of captures (test seam; gpu_host.collect_from_fixture).

    Kept here for callers that import gpu_facts alone (the cutover reads processes so).
    """
    # Imported here: gpu_host imports this module.
    from ansible_collections.vllm_fleet.fleet.plugins.module_utils import gpu_host

    return gpu_host.collect_from_fixture(fixture_dir, expected_bus_ids=expected_bus_ids)
