# Copyright 2026 vllm-fleet contributors
# Apache License 2.0 (see galaxy.yml)
"""Parse what nvidia-smi and the kernel say about NVIDIA GPUs.

Plain functions that take text (or a ``run_command`` callable) so pytest can
drive them with captured outputs. Runs on target hosts: standard library only.

Units: every memory figure returned is in BYTES (nvidia-smi reports MiB).
"""

from __future__ import annotations

import os
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

PROC_VERSION_PATH = "/proc/driver/nvidia/version"
SYSFS_PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA_PCI_VENDOR = "10de"
# PCI classes counted as GPUs, as `lspci -d 10de: -n` prints them:
# 0300 VGA compatible controller, 0302 3D controller.
GPU_PCI_CLASSES = ("0300", "0302")

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
_KMOD_VERSION_RE = re.compile(r"Kernel Module\s+(?:for\s+\S+\s+)?(\d+(?:\.\d+)+)")


class GpuFactsError(Exception):
    """Raised when an nvidia-smi output cannot be understood."""


def strip_ansi(text):
    """Remove ANSI escape sequences (real `topo -m` output underlines its header)."""
    return _ANSI_RE.sub("", text or "")


def _na(value):
    return value is None or value.strip() in ("", "N/A", "[N/A]", "[Not Supported]")


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


def _strip_unit(value):
    value = value.strip()
    match = _UNIT_RE.match(value)
    return match.group(1) if match else value


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


def parse_query_gpu(text, fields=QUERY_GPU_FIELDS):
    """Parse `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`.

    Without `noheader` the field names come from the header line (units such as
    `[MiB]` stripped), so a capture asked with other fields in another order
    still parses. Values with units (`143771 MiB`) are accepted too.
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
                f"expected {len(fields)} comma-separated fields ({', '.join(fields)}), "
                f"found {len(row)}: {','.join(row)!r}"
            )
        raw = dict(zip(fields, row, strict=True))
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
        gpus.append(
            {
                "name": _xml_text(gpu, "product_name"),
                "architecture": _xml_text(gpu, "product_architecture"),
                "uuid": _xml_text(gpu, "uuid"),
                "pci_bus_id": _xml_text(gpu, "pci/pci_bus_id") or gpu.get("id"),
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
        if len(row) != len(QUERY_APPS_FIELDS):
            raise GpuFactsError(
                f"expected 3 fields (pid, used_memory, gpu_uuid), found {','.join(row)!r}"
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


def _topology_table(text):
    """Split `topo -m` text into its header cells and body rows (tab-separated)."""
    header, body = None, []
    for line in strip_ansi(text).splitlines():
        if line.startswith("Legend") or (not line.strip() and body):
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
        raise GpuFactsError("nvidia-smi topo -m printed no header line with GPU columns")
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
    """Tell the open kernel module from the proprietary one.

    /proc/driver/nvidia/version says "NVIDIA UNIX Open Kernel Module" for the
    open flavour and "NVIDIA UNIX x86_64 Kernel Module" for the proprietary
    one; `modinfo -F license nvidia` says "Dual MIT/GPL" vs "NVIDIA".
    Returns (flavour, version, source) with flavour open|proprietary|unknown.
    """
    lines = [ln for ln in (proc_version_text or "").splitlines() if ln.startswith("NVRM")]
    if lines:
        first = lines[0]
        match = _KMOD_VERSION_RE.search(first)
        version = match.group(1) if match else None
        if "Open Kernel Module" in first:
            return "open", version, "proc"
        if "Kernel Module" in first:
            return "proprietary", version, "proc"
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


def parse_lspci_n(text):
    """Count NVIDIA VGA/3D controllers in `lspci -n` style lines.

    Lines look like `0000:00:06.0 0302: 10de:2335 (rev a1)` (lspci -n) or
    `00:06.0 0302: 10de:2335` and may come from :func:`read_sysfs_pci`.
    """
    found = []
    for line in (text or "").splitlines():
        match = re.match(
            r"^(\S+)\s+(?:Class\s+)?([0-9a-fA-F]{4}):\s+([0-9a-fA-F]{4}):", line.strip()
        )
        if not match:
            continue
        slot, klass, vendor = match.groups()
        if vendor.lower() == NVIDIA_PCI_VENDOR and klass.lower() in GPU_PCI_CLASSES:
            found.append(slot)
    return found


def read_sysfs_pci(root=SYSFS_PCI_DEVICES):
    """Render /sys/bus/pci/devices as `lspci -n` lines (no pciutils needed).

    Returns None when the directory cannot be read.
    """
    try:
        slots = sorted(os.listdir(root))
    except OSError:
        return None
    lines = []
    for slot in slots:
        try:
            with open(os.path.join(root, slot, "vendor")) as handle:
                vendor = handle.read().strip().lower().replace("0x", "")
            with open(os.path.join(root, slot, "class")) as handle:
                klass = handle.read().strip().lower().replace("0x", "")
            with open(os.path.join(root, slot, "device")) as handle:
                device = handle.read().strip().lower().replace("0x", "")
        except OSError:
            continue
        lines.append(f"{slot} {klass[:4]}: {vendor}:{device}")
    return "\n".join(lines) + ("\n" if lines else "")


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
        "topology": None,
        "processes": [],
        "pci_gpu_count": None,
        "pci_gpu_slots": [],
    }


def _merge_gpus(query_gpus, xml_info):
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
        merged.append(item)
    return merged


def collect(
    run_command,
    nvidia_smi="nvidia-smi",
    proc_version_text=None,
    modinfo_license=None,
    lspci_text=None,
):
    """Gather GPU facts by calling nvidia-smi through `run_command`.

    run_command(argv) -> (rc, stdout, stderr), as AnsibleModule.run_command.
    nvidia_smi is the path of the binary, or None when it is absent.
    proc_version_text: the contents of /proc/driver/nvidia/version (or None).
    modinfo_license: `modinfo -F license nvidia` output (fallback for the flavour).
    lspci_text: `lspci -n` style lines to count NVIDIA GPUs on the PCI bus.
    Never raises for an absent or failing nvidia-smi: returns facts with
    `present: false`, `gpu_count: 0` and a `msg` saying why.
    """
    pci_slots = parse_lspci_n(lspci_text) if lspci_text is not None else None

    def _with_pci(facts):
        facts["pci_gpu_slots"] = pci_slots or []
        facts["pci_gpu_count"] = None if pci_slots is None else len(pci_slots)
        return facts

    if not nvidia_smi:
        return _with_pci(empty_facts("nvidia-smi not found: no NVIDIA driver userspace installed"))

    query = [
        nvidia_smi,
        "--query-gpu=" + ",".join(QUERY_GPU_FIELDS),
        "--format=csv,noheader,nounits",
    ]
    rc, out, err = run_command(query)
    if rc != 0:
        said = " ".join(((out or "") + " " + (err or "")).split())
        facts = empty_facts(f"nvidia-smi failed (rc={rc}): {said}", nvidia_smi)
        facts["nvidia_smi_rc"] = rc
        flavour, version, source = kernel_module_flavour(proc_version_text, modinfo_license)
        facts["kernel_module"] = {"flavour": flavour, "version": version, "source": source}
        return _with_pci(facts)
    query_gpus = parse_query_gpu(out)

    rc, out, err = run_command([nvidia_smi, "-q", "-x"])
    xml_info = parse_smi_xml(out) if rc == 0 and out.strip() else None

    topology = None
    rc, out, err = run_command([nvidia_smi, "topo", "-m"])
    if rc == 0 and out.strip():
        topology = parse_topology(out)

    uuid_index = {g["uuid"]: g["index"] for g in query_gpus}
    rc, out, err = run_command(
        [
            nvidia_smi,
            "--query-compute-apps=" + ",".join(QUERY_APPS_FIELDS),
            "--format=csv,noheader,nounits",
        ]
    )
    if rc == 0:
        processes = parse_compute_apps(out)
    else:
        processes = []
        for gpu in (xml_info or {}).get("gpus", []):
            for proc in gpu["processes"]:
                processes.append(
                    {
                        "pid": proc["pid"],
                        "used_memory_bytes": proc["used_memory_bytes"],
                        "gpu_uuid": gpu["uuid"],
                    }
                )
    for proc in processes:
        proc["gpu_index"] = uuid_index.get(proc["gpu_uuid"])

    driver_version = (xml_info or {}).get("driver_version")
    if not driver_version and query_gpus:
        driver_version = query_gpus[0].get("driver_version")
    flavour, kmod_version, source = kernel_module_flavour(proc_version_text, modinfo_license)
    gpus = _merge_gpus(query_gpus, xml_info)
    return _with_pci(
        {
            "present": True,
            "nvidia_smi": nvidia_smi,
            "msg": f"{len(gpus)} NVIDIA GPU(s) found",
            "gpu_count": len(gpus),
            "gpus": gpus,
            "driver_version": driver_version,
            "cuda_version": (xml_info or {}).get("cuda_version"),
            "kernel_module": {"flavour": flavour, "version": kmod_version, "source": source},
            "topology": topology,
            "processes": processes,
        }
    )


# Captured outputs, one file per command: the test seam `fixture_dir`.
FIXTURE_FILES = {
    "query_gpu": "nvidia-smi-query-gpu.csv",
    "xml": "nvidia-smi-q.xml",
    "topo": "nvidia-smi-topo-m.txt",
    "compute_apps": "nvidia-smi-query-compute-apps.csv",
    "proc_version": "proc-driver-nvidia-version.txt",
    "modinfo_license": "modinfo-license.txt",
    "lspci": "lspci-n.txt",
}


def read_fixture(fixture_dir, key):
    """Contents of one captured output in fixture_dir, or None if not captured."""
    path = os.path.join(fixture_dir, FIXTURE_FILES[key])
    if not os.path.isfile(path):
        return None
    with open(path) as handle:
        return handle.read()


def fixture_runner(fixture_dir):
    """A run_command that answers nvidia-smi calls from captured files.

    TEST SEAM: lets a lab without a GPU (Molecule, CI) run the real parsing
    and the real module on outputs captured on a GPU machine. A command whose
    capture is missing answers rc=127 as if it could not run.
    """

    def run(argv):
        args = argv[1:]
        if args and args[0].startswith("--query-gpu="):
            key = "query_gpu"
        elif args == ["-q", "-x"]:
            key = "xml"
        elif args == ["topo", "-m"]:
            key = "topo"
        elif args and args[0].startswith("--query-compute-apps="):
            key = "compute_apps"
        else:
            return 127, "", f"no capture for {' '.join(argv)} in {fixture_dir}"
        text = read_fixture(fixture_dir, key)
        if text is None:
            return 127, "", f"no capture {FIXTURE_FILES[key]} in {fixture_dir}"
        return 0, text, ""

    return run


def collect_from_fixture(fixture_dir):
    """collect() fed entirely from a directory of captured outputs (test seam)."""
    if read_fixture(fixture_dir, "query_gpu") is None:
        return collect(
            None, nvidia_smi=None, proc_version_text=read_fixture(fixture_dir, "proc_version")
        )
    return collect(
        fixture_runner(fixture_dir),
        nvidia_smi="nvidia-smi",
        proc_version_text=read_fixture(fixture_dir, "proc_version"),
        modinfo_license=read_fixture(fixture_dir, "modinfo_license"),
        lspci_text=read_fixture(fixture_dir, "lspci"),
    )
