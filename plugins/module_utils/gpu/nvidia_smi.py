# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Parse what nvidia-smi prints: --query-gpu, -q -x, -q (text), --query-compute-apps, topo -m.

Plain functions that take text, so pytest and the lab drive the very same code
with captured outputs. Runs on target hosts: standard library only. Also the
one parser of a compute capability ('12.0') that every module_utils uses.

Units: every memory figure returned is in BYTES (nvidia-smi reports MiB).

Whatever cannot be parsed raises GpuFactsError naming the text and the format
that was wanted: unfamiliar text is an error, never a silent zero.
"""

from __future__ import annotations

import re
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

# NVIDIA's "CUDA GPU Compute Capability" table (developer.nvidia.com/cuda-gpus, linked
# from the CUDA Programming Guide's "Obtain the GPU Compute Capability"), for the
# data-centre and workstation GPUs a model server uses: `nvidia-smi -q` (what support
# bundles carry) prints no compute capability, --query-gpu's compute_cap does. First
# match wins; a name none matches stays unknown (None), as before.
CC_BY_NAME = (
    (r"\bRTX PRO \d+ Blackwell\b|\bGeForce RTX 50\d0\b", "12.0"),
    (r"\bG?B300\b", "10.3"),
    (r"\bG?B200\b|\bB100\b", "10.0"),
    (r"\bG?H100\b|\bG?H200\b|\bH800\b|\bH20\b", "9.0"),
    (r"\bL40S?\b|\bL4\b|\bRTX 6000 Ada\b|\bGeForce RTX 40\d0\b", "8.9"),
    (r"\bA10G?\b|\bA40\b|\bRTX A[456]000\b|\bGeForce RTX 30\d0\b", "8.6"),
    (r"\bA100\b|\bA800\b|\bA30\b", "8.0"),
)

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

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_UNIT_RE = re.compile(r"^(-?[0-9.]+)\s*([A-Za-z%/]+)?$")
_HEADER_UNIT_RE = re.compile(r"\s*\[[^\]]*\]\s*$")
_NV_RE = re.compile(r"^NV(\d+)$")
_BUS_ID_RE = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
# nvidia-smi names a GPU it cannot open, on stdout or stderr, e.g.
# "Unable to determine the device handle for GPU0000:0B:00.0: Unknown Error".
_LOST_RE = re.compile(
    r"Unable to determine the device handle for (?:GPU|gpu)?\s*"
    r"(?P<bus>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]):?\s*(?P<error>.*)$"
)
# A compute capability, major[.minor] ('12.0', '9.0'; a bare '12' is 12.0).
_CC_RE = re.compile(r"^(\d+)(?:\.(\d+))?$")
# The header of one GPU's block in `nvidia-smi -q` text.
_SMI_GPU_HEAD_RE = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")


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
    """'12.0' -> (12, 0), '12' -> (12, 0); None or N/A -> None.

    The one parser of a compute capability: kernel_module, model_fit and
    catalog_profile call it (each turns GpuFactsError into its own error).
    """
    if value is None:
        return None
    text = str(value).strip()
    if _na(text):
        return None
    match = _CC_RE.match(text)
    if not match:
        raise GpuFactsError(f"expected a compute capability like '12.0', found {value!r}")
    return int(match.group(1)), int(match.group(2) or 0)


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


def _smi_text_tree(text):
    """`nvidia-smi -q` text as (top-level fields, [(bus id, {path: value})]).

    Paths join the indented headings with '/', e.g. 'FB Memory Usage/Total'.
    """
    top, gpus, stack = {}, [], []
    current = None
    for raw in (text or "").splitlines():
        if not raw.strip() or raw.lstrip().startswith("==="):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        line = raw.strip()
        head = _SMI_GPU_HEAD_RE.match(line)
        if indent == 0 and head:
            current = {}
            gpus.append((head.group(1), current))
            stack = []
            continue
        key, sep, value = line.partition(":")
        key = key.strip()
        # Headings nest by 4 spaces under a GPU (its fields start at 4).
        level = max(indent // 4 - (1 if current is not None else 0), 0)
        stack = stack[:level]
        if not sep or (not value.strip() and sep):
            stack.append(key)
            continue
        target = top if current is None else current
        target["/".join([*stack, key])] = value.strip()
    return top, gpus


def parse_smi_text(text):
    """Parse `nvidia-smi -q` as text (the form support bundles carry) like parse_smi_xml.

    Reads the driver and CUDA versions, `Attached GPUs`, and per GPU (each
    headed `GPU 00000000:18:00.0`): product name and architecture, UUID,
    bus id, minor number, persistence mode and FB memory. Raises
    GpuFactsError for text that is neither (no NVSMI LOG fields, no GPU
    header while GPUs are attached).
    """
    top, blocks = _smi_text_tree(text)
    if "Driver Version" not in top and not blocks:
        raise GpuFactsError(
            "nvidia-smi -q output is in an unrecognised format: wanted XML (-q -x) or the "
            "text form ('Driver Version : 580.95.05', 'GPU 00000000:18:00.0' headers), found "
            f"{_first_line(text)!r}"
        )
    gpus = []
    for bus, fields in blocks:
        minor = fields.get("Minor Number")

        def value(path, fields=fields):
            found = fields.get(path)
            return None if found is None or _na(found) else found

        gpus.append(
            {
                "name": value("Product Name"),
                "architecture": value("Product Architecture"),
                "uuid": value("GPU UUID"),
                "pci_bus_id": value("PCI/Bus Id") or bus,
                "minor_number": int(minor) if minor and minor.isdigit() else None,
                "persistence_mode": _persistence(fields.get("Persistence Mode")),
                "memory_total_bytes": mib_to_bytes(value("FB Memory Usage/Total")),
                "memory_used_bytes": mib_to_bytes(value("FB Memory Usage/Used")),
                "memory_free_bytes": mib_to_bytes(value("FB Memory Usage/Free")),
                "processes": [],
            }
        )
    attached = top.get("Attached GPUs", "")
    return {
        "driver_version": None if _na(top.get("Driver Version")) else top["Driver Version"],
        "cuda_version": None if _na(top.get("CUDA Version")) else top["CUDA Version"],
        "attached_gpus": int(attached) if attached.isdigit() else len(gpus),
        "gpus": gpus,
        "format": "text",
    }


def compute_capability_from_name(name):
    """'NVIDIA RTX PRO 6000 Blackwell Server Edition' -> '12.0' (CC_BY_NAME); None unknown."""
    for pattern, capability in CC_BY_NAME:
        if re.search(pattern, name or ""):
            return capability
    return None


def render_query_gpu(info):
    """parse_smi_xml/parse_smi_text's GPUs as `--query-gpu` CSV (with its header).

    Used where a capture has `nvidia-smi -q` but no --query-gpu table (a support
    bundle): indices follow the order of the GPUs in it (PCI bus order, as
    nvidia-smi numbers them). -q prints no compute capability: it is NVIDIA's for
    the GPU's name (compute_capability_from_name), N/A for a name it does not list.
    """

    def mib(value):
        return "" if value is None else str(value // MIB)

    lines = [", ".join(QUERY_GPU_FIELDS)]
    for index, gpu in enumerate(info.get("gpus") or []):
        persistence = gpu.get("persistence_mode")
        lines.append(
            ", ".join(
                [
                    str(index),
                    gpu.get("name") or "",
                    gpu.get("uuid") or "",
                    gpu.get("pci_bus_id") or "",
                    mib(gpu.get("memory_total_bytes")),
                    mib(gpu.get("memory_used_bytes")),
                    mib(gpu.get("memory_free_bytes")),
                    compute_capability_from_name(gpu.get("name")) or "N/A",
                    "N/A" if persistence is None else ("Enabled" if persistence else "Disabled"),
                    info.get("driver_version") or "N/A",
                ]
            )
        )
    return "\n".join(lines) + "\n"


def parse_smi_xml(text):
    """Parse `nvidia-smi -q -x`: driver version, highest CUDA, per-GPU details.

    Text that is not XML is read as `nvidia-smi -q` text (parse_smi_text): a
    support bundle's capture answers the same questions.
    """
    if not (text or "").lstrip().startswith("<"):
        return parse_smi_text(text)
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


def _smi_said(out, err):
    return " ".join(((out or "") + " " + (err or "")).split())
