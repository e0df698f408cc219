# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""What the kernel says about NVIDIA GPUs besides nvidia-smi: the PCI bus
(sysfs, lspci in its -n, -nn and -vvv forms), the kernel log (the driver's
banner, Xid errors), /proc/driver/nvidia/gpus, the /dev/nvidia* nodes and
whether CUDA can initialise.

Each input has a parse_* (text in, facts out; GpuFactsError for an
unrecognised format) and, where the host is read directly, a read_* that
renders the host's files in the layout parse_* reads (gpu_host.LiveHost calls
them; captures replace them in tests). Runs on target hosts: standard library
only.
"""

from __future__ import annotations

import json
import os
import re
import stat

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu.nvidia_smi import (
    _BUS_ID_RE,
    GpuFactsError,
    _first_line,
    normalise_bus_id,
)

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


# `lspci`, `lspci -v`..`-vvv` without -n: the class and vendor by name.
#   18:00.0 3D controller: NVIDIA Corporation GH100 [H100 NVL] (rev a1)
_PCI_NAMED_RE = re.compile(
    r"^(?P<slot>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+"
    r"(?P<klass>[A-Za-z0-9][^:\[]*?)(?:\s+\[[0-9a-fA-F]{4}\])?:\s+(?P<name>.*)$"
)
GPU_PCI_CLASS_NAMES = ("vga compatible controller", "3d controller")
NVIDIA_PCI_VENDOR_NAME = "NVIDIA Corporation"


def _named_gpu(match):
    name = match.group("name")
    return match.group("klass").strip().lower() in GPU_PCI_CLASS_NAMES and (
        name.startswith(NVIDIA_PCI_VENDOR_NAME) or f"[{NVIDIA_PCI_VENDOR}:" in name.lower()
    )


def parse_lspci_n(text):
    """NVIDIA VGA/3D controllers in a PCI device listing, as normalised bus ids.

    Accepts `lspci -n`, `lspci -nn`, the sysfs layout of read_sysfs_pci
    (`0000:00:06.0 0x030200 0x10de:0x2335`), and `lspci` / `lspci -vvv` as
    support bundles carry it (class and vendor by name: '18:00.0 3D
    controller: NVIDIA Corporation ...'; the indented detail lines are
    skipped). Blank and '#' lines are skipped; any other line raises
    GpuFactsError (a list of bare slots would otherwise count as zero GPUs).
    """
    found = []
    for line in (text or "").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or line[:1].isspace():
            continue
        if stripped.startswith("pcilib:"):  # lspci's own warnings (not root, no sysfs)
            continue
        for pattern in _PCI_LINE_RES:
            match = pattern.match(stripped)
            if match and _BUS_ID_RE.match(match.group("slot")):
                break
        else:
            named = _PCI_NAMED_RE.match(stripped)
            if named:
                if _named_gpu(named):
                    found.append(normalise_bus_id(named.group("slot")))
                continue
            raise GpuFactsError(
                f"unrecognised line in the PCI device listing: {stripped[:120]!r}; wanted "
                "`lspci -n` lines ('0000:18:00.0 0302: 10de:2bb5'), `lspci -nn` or `lspci -vvv` "
                "lines ('18:00.0 3D controller: NVIDIA Corporation ...'), or sysfs lines "
                "('0000:00:06.0 0x030200 0x10de:0x2335')"
            )
        if (
            match.group("vendor").lower() == NVIDIA_PCI_VENDOR
            and match.group("klass").lower() in GPU_PCI_CLASSES
        ):
            found.append(normalise_bus_id(match.group("slot")))
    return found


# The kernel log: `dmesg` (with or without timestamps), `journalctl -k`, syslog.
# "NVRM: Xid (PCI:0000:18:00): 79, pid=..., GPU has fallen off the bus."
_XID_RE = re.compile(
    r"NVRM: Xid \(PCI:(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?\):\s*"
    r"(?P<xid>\d+),\s*(?P<text>.*)$"
)
# Newer drivers say it without an Xid line, over three lines:
# "NVRM: The NVIDIA GPU 0000:b3:00.0" ... "NVRM: fallen off the bus and is not responding".
_FALLEN_GPU_RE = re.compile(r"NVRM: The NVIDIA GPU (?P<bus>[0-9A-Fa-f:.]+)\s*$")
_DMESG_TIME_RE = re.compile(r"^\[\s*(?P<time>\d+\.\d+)\]")
# Xid codes that need the GPU reset or the host rebooted before it serves again
# (NVIDIA's Xid catalog: 48 DBE, 63/64 row remapping, 79 fallen off the bus,
# 94/95 contained/uncontained ECC, 119/120 GSP).
XID_SERIOUS = {
    48: "double-bit ECC error",
    63: "row remapping event",
    64: "row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


def parse_kernel_log(text):
    """What the kernel log says about the NVIDIA driver: its banner and the Xid errors.

    Returns {"banner": the last 'NVRM: loading NVIDIA UNIX ...' line or None
    (kernel_module.kernel_module_flavour reads it), "xids": [{"bus_id", "xid",
    "text", "time"}] in order}. Lines that are neither are skipped: a kernel
    log holds everything else too.
    """
    banner, xids, fallen = None, [], None
    for line in (text or "").splitlines():
        if "NVRM: loading NVIDIA UNIX" in line:
            banner = line.strip()
            continue
        head = _FALLEN_GPU_RE.search(line)
        if head:
            fallen = (head.group("bus"), _DMESG_TIME_RE.match(line.strip()))
            continue
        if fallen and "fallen off the bus" in line:
            bus, stamp = fallen
            xids.append(
                {
                    "bus_id": normalise_bus_id(bus),
                    "xid": 79,
                    "text": "fallen off the bus (the driver's message, without an Xid line)",
                    "time": float(stamp.group("time")) if stamp else None,
                }
            )
            fallen = None
            continue
        match = _XID_RE.search(line)
        if match:
            stamp = _DMESG_TIME_RE.match(line.strip())
            xids.append(
                {
                    "bus_id": normalise_bus_id(match.group("bus") + ".0"),
                    "xid": int(match.group("xid")),
                    "text": match.group("text").strip(),
                    "time": float(stamp.group("time")) if stamp else None,
                }
            )
    return {"banner": banner, "xids": xids}


def xid_problems(xids):
    """One line per GPU with a serious Xid in the kernel log, with what to do."""
    worst = {}
    for item in xids:
        if item["xid"] in XID_SERIOUS:
            worst.setdefault(item["bus_id"], []).append(item["xid"])
    return [
        f"GPU {bus}: the kernel log has Xid "
        + ", ".join(f"{x} ({XID_SERIOUS[x]})" for x in sorted(set(codes)))
        + ": reset the GPU (`nvidia-smi -r -i <index>`) or reboot before serving on it"
        for bus, codes in sorted(worst.items())
    ]


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
