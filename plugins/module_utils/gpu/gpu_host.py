# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Where GPU facts come from: the live host, or a directory of captures.

Both hosts answer the same two questions, so `gather` runs the same parsers
either way:
- run(argv) -> (rc, stdout, stderr) for nvidia-smi calls;
- read(key) -> text or None for the named inputs in FIXTURE_FILES.

TEST SEAM: FixtureHost lets a lab without a GPU (Molecule, CI) run the real
parsing and the real module on outputs captured on GPU machines. The layout
it expects is FIXTURE_FILES (documented in tests/fixtures/gpu/README.md).
"""

from __future__ import annotations

import json
import os

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import (
    gpu_fabric,
    gpu_facts,
    gpu_readers,
    nvidia_smi,
)

# Captured outputs, one file per command or input: the `fixture_dir` layout.
FIXTURE_FILES = {
    # nvidia-smi (run); a file `<name>.rc` beside one holds its exit status (default 0)
    "query_gpu": "nvidia-smi-query-gpu.csv",
    "xml": "nvidia-smi-q.xml",
    # `nvidia-smi -q` as text (support bundles): answers -q -x and --query-gpu when
    # their own captures are absent
    "smi_text": "nvidia-smi-q.txt",
    "topo": "nvidia-smi-topo-m.txt",
    "compute_apps": "nvidia-smi-query-compute-apps.csv",
    "query_fabric": "nvidia-smi-query-fabric.csv",
    "topo_p2p_r": "nvidia-smi-topo-p2p-r.txt",
    # inputs (read)
    "proc_version": "proc-driver-nvidia-version.txt",
    "proc_gpus": "proc-driver-nvidia-gpus.txt",
    "modinfo_license": "modinfo-license.txt",
    "lspci": "lspci-n.txt",  # absent: the GPUs are counted in lspci-vvv.txt
    "lspci_vvv": "lspci-vvv.txt",
    "pci_acs": "sysfs-pci-acs.txt",
    "pci_paths": "sysfs-pci-paths.txt",
    "cmdline": "proc-cmdline.txt",
    "dmesg": "dmesg.txt",  # the kernel log: the driver's banner, Xid errors
    "iommu": "sysfs-iommu.txt",
    "dev_nodes": "dev-nvidia.txt",
    "cuda_init": "cuda-init.json",
    "container": "container.txt",
    "meminfo": "proc-meminfo.txt",  # the host's RAM (warm_switch.host_ram_for_sleepers)
}
TIMEOUT_EXIT = 124  # timeout(1)'s exit status when it killed the command
RUN_KEYS = ("query_gpu", "xml", "topo", "compute_apps", "query_fabric", "topo_p2p_r")


def smi_key(argv):
    """Which capture answers this nvidia-smi command line (None: not one we ask)."""
    args = list(argv[1:])
    if args and args[0].startswith("--query-gpu="):
        fields = args[0].split("=", 1)[1]
        return "query_fabric" if fields == ",".join(gpu_fabric.FABRIC_QUERY_FIELDS) else "query_gpu"
    if args == ["-q", "-x"]:
        return "xml"
    if args == ["topo", "-m"]:
        return "topo"
    if args == ["topo", "-p2p", "r"]:
        return "topo_p2p_r"
    if args and args[0].startswith("--query-compute-apps="):
        return "compute_apps"
    return None


class FixtureHost:
    """Answers from a directory of captures (test seam)."""

    def __init__(self, fixture_dir):
        self.fixture_dir = fixture_dir
        # No capture of the main query (nor an `nvidia-smi -q` text) means nvidia-smi is absent.
        present = self._path("query_gpu") or self._path("smi_text")
        self.nvidia_smi = "nvidia-smi" if present else None
        self.capture_problems = []  # what the captures themselves lack (a truncated paste)

    def _path(self, key):
        path = os.path.join(self.fixture_dir, FIXTURE_FILES[key])
        return path if os.path.isfile(path) else None

    def read(self, key):
        path = self._path(key)
        if path is None:
            return None
        with open(path) as handle:
            return handle.read()

    def run(self, argv):
        key = smi_key(argv)
        if key is None:
            return 127, "", f"no capture for {' '.join(argv)} in {self.fixture_dir}"
        text = self.read(key)
        if text is None and key in ("query_gpu", "xml") and self._path("smi_text"):
            # A support bundle's `nvidia-smi -q` text answers both (gather parses it as -q -x).
            text = self.read("smi_text")
            if key == "query_gpu":
                info = nvidia_smi.parse_smi_text(text)
                if info["attached_gpus"] > len(info["gpus"]):
                    self.capture_problems.append(
                        f"{FIXTURE_FILES['smi_text']} says {info['attached_gpus']} attached GPUs "
                        f"but holds the blocks of {len(info['gpus'])}: the capture is cut "
                        "(paste all of `nvidia-smi -q`); the GPU count read from it is short"
                    )
                text = nvidia_smi.render_query_gpu(info)
            return 0, text, ""
        if text is None:
            return 127, "", f"no capture {FIXTURE_FILES[key]} in {self.fixture_dir}"
        rc_path = os.path.join(self.fixture_dir, FIXTURE_FILES[key] + ".rc")
        rc = 0
        if os.path.isfile(rc_path):
            with open(rc_path) as handle:
                rc = int(handle.read().strip())
        return rc, text, ""


class LiveHost:
    """Answers from the machine itself: run_command, /proc, /sys and /dev."""

    def __init__(
        self,
        run_command,
        nvidia_smi,
        paths=None,
        python=None,
        lspci=None,
        timeout_bin=None,
        modinfo=None,
        cuda_init=False,
    ):
        self.run = run_command
        self.nvidia_smi = nvidia_smi
        self.paths = {
            "proc_version": gpu_readers.PROC_VERSION_PATH,
            "proc_gpus": gpu_readers.PROC_GPUS_DIR,
            "sysfs_pci": gpu_readers.SYSFS_PCI_DEVICES,
            "cmdline": "/proc/cmdline",
            "meminfo": "/proc/meminfo",
            "iommu_groups": "/sys/kernel/iommu_groups",
            "dev": "/dev",
            **(paths or {}),
        }
        self.python = python
        self.lspci = lspci
        self.timeout_bin = timeout_bin
        self.modinfo = modinfo
        self.cuda_init = cuda_init
        self.gpu_slots = []  # set by gather once the PCI listing is read

    def _file(self, path):
        try:
            with open(path) as handle:
                return handle.read()
        except OSError:
            return None

    def _bridges(self):
        paths = gpu_fabric.parse_pci_paths(self.read("pci_paths") or "")
        return sorted({b for chain in paths.values() for b in chain})

    def _cuda_init(self):
        """Run CUDA_INIT_SCRIPT in a child Python under a hard timeout (a hung driver)."""
        argv = [self.python, "-c", gpu_readers.CUDA_INIT_SCRIPT]
        if self.timeout_bin:
            argv = [self.timeout_bin, "120", *argv]
        rc, out, err = self.run(argv)
        if rc == 0 and out.strip():
            return out
        if rc == TIMEOUT_EXIT:
            why = "hung for 120 s and was killed"
        else:
            why = f"exited {rc}: {err.strip()[-300:]}"
        return json.dumps({"loaded": True, "init_rc": -1, "init_error": f"the check {why}"})

    def _modinfo_license(self):
        if not self.modinfo:
            return None
        rc, out, _err = self.run([self.modinfo, "-F", "license", "nvidia"])
        return out if rc == 0 else None

    def _lspci_vvv(self):
        # As root lspci prints the ACS bits; otherwise "<access denied>" (read as unknown).
        if not self.lspci:
            return None
        rc, out, _err = self.run([self.lspci, "-vvv"])
        return out if rc == 0 and out.strip() else None

    def read(self, key):
        p = self.paths
        readers = {
            "proc_version": lambda: self._file(p["proc_version"]),
            "proc_gpus": lambda: gpu_readers.read_proc_gpus(p["proc_gpus"]),
            "lspci": lambda: gpu_readers.read_sysfs_pci(p["sysfs_pci"]),
            "modinfo_license": self._modinfo_license,
            "pci_paths": lambda: gpu_fabric.read_pci_paths(self.gpu_slots, p["sysfs_pci"]),
            "lspci_vvv": self._lspci_vvv,
            "pci_acs": lambda: gpu_fabric.read_sysfs_acs(self._bridges(), p["sysfs_pci"]),
            "cmdline": lambda: self._file(p["cmdline"]),
            "meminfo": lambda: self._file(p["meminfo"]),
            "iommu": lambda: gpu_fabric.read_iommu(
                self.gpu_slots, p["iommu_groups"], p["sysfs_pci"]
            ),
            "dev_nodes": lambda: gpu_readers.read_device_nodes(p["dev"]),
            "cuda_init": lambda: self._cuda_init() if self.cuda_init and self.python else None,
            "container": _container_kind,
        }
        return readers[key]() if key in readers else None


def _container_kind():
    """'lxc', 'docker', ... when this machine is a container, else None (systemd's marker)."""
    for path in ("/run/systemd/container", "/run/container_type"):
        try:
            with open(path) as handle:
                kind = handle.read().strip()
        except OSError:
            continue
        if kind:
            return kind
    try:
        with open("/proc/1/environ", "rb") as handle:
            for item in handle.read().split(b"\0"):
                if item.startswith(b"container="):
                    return item.split(b"=", 1)[1].decode() or None
    except OSError:
        pass
    return None


def _kernel_log_facts(kernel_log):
    """The kernel log's facts (None when no log was read): banner, Xid errors, warnings."""
    if kernel_log is None:
        return None
    return {
        "banner": kernel_log["banner"],
        "xids": kernel_log["xids"],
        "warnings": gpu_readers.xid_problems(kernel_log["xids"]),
    }


def _container_gpus(container, proc_gpus_text, nodes):
    """The bus ids of the host's GPUs a container was given, or None (not a container, or unknown).

    A container reads the host's PCI bus and /proc/driver/nvidia/gpus (every GPU of
    the host), but only the GPUs whose /dev/nvidia<minor> was passed in are its own:
    the others are not missing. None when the nodes or the driver's list were not read,
    or no GPU's node is there (then every GPU is expected, and the missing nodes are
    reported as such).
    """
    if not container or nodes is None or proc_gpus_text is None:
        return None
    given = [bus for bus, gpu in gpu_readers.parse_proc_gpus(proc_gpus_text).items()
             if gpu.get("minor") is not None and f"/dev/nvidia{gpu['minor']}" in nodes]
    return given or None


def gather(host, expected_bus_ids=None, fabric=True, device_nodes=True):
    """All GPU facts from one host (live or fixture), the same code either way.

    Returns gpu_facts.collect's dict with `problems` (driver/GPU and runtime), `fabric`
    (when nvidia-smi answers and fabric is true), `device_nodes`, `cuda`,
    `container`. Raises GpuFactsError for text in an unrecognised format.
    """
    proc_version = host.read("proc_version")
    log_text = host.read("dmesg")
    kernel_log = gpu_readers.parse_kernel_log(log_text) if log_text is not None else None
    banner_from_log = proc_version is None and bool(kernel_log and kernel_log["banner"])
    if banner_from_log:
        proc_version = kernel_log["banner"]
    lspci = host.read("lspci")
    proc_gpus = host.read("proc_gpus")
    container = host.read("container")
    container = container.strip() if container and container.strip() else None
    nodes = host.read("dev_nodes") if device_nodes else None
    nodes = gpu_readers.parse_device_nodes(nodes) if nodes is not None else None
    facts = gpu_facts.collect(
        host.run,
        nvidia_smi=host.nvidia_smi,
        proc_version_text=proc_version,
        modinfo_license=None if proc_version else host.read("modinfo_license"),
        lspci_text=lspci if lspci is not None else host.read("lspci_vvv"),
        proc_gpus_text=proc_gpus,
        expected_bus_ids=expected_bus_ids or _container_gpus(container, proc_gpus, nodes),
    )
    if banner_from_log:
        facts["kernel_module"]["source"] = "kernel_log"
    facts["kernel_log"] = _kernel_log_facts(kernel_log)
    facts["container"] = container
    facts["device_nodes"] = nodes
    cuda = host.read("cuda_init")
    facts["cuda"] = gpu_readers.parse_cuda_init(cuda) if cuda is not None else {"checked": False}
    if fabric and facts["present"]:
        host.gpu_slots = sorted(
            nvidia_smi.normalise_bus_id(g["pci_bus_id"])
            for g in facts["gpus"]
            if g.get("pci_bus_id")
        )
        smi = host.nvidia_smi
        rc, query, _err = host.run(
            [smi, "--query-gpu=" + ",".join(gpu_fabric.FABRIC_QUERY_FIELDS), "--format=csv"]
        )
        rc_p2p, p2p, _err = host.run([smi, "topo", "-p2p", "r"])
        lspci_vvv = host.read("lspci_vvv")
        facts["fabric"] = gpu_fabric.fabric_facts(
            facts["gpus"],
            query_text=query if rc == 0 and query.strip() else None,
            p2p_text=p2p if rc_p2p == 0 and p2p.strip() else None,
            lspci_vvv_text=lspci_vvv,
            acs_text=None if lspci_vvv is not None else host.read("pci_acs"),
            paths_text=host.read("pci_paths"),
            cmdline_text=host.read("cmdline"),
            iommu_text=host.read("iommu"),
        )
    facts["problems"] = (
        facts["problems"]
        + list(getattr(host, "capture_problems", []))
        + gpu_facts.runtime_problems(facts)
    )
    return facts


def collect_from_fixture(fixture_dir, expected_bus_ids=None):
    """gather() fed entirely from a directory of captured outputs (test seam)."""
    return gather(FixtureHost(fixture_dir), expected_bus_ids=expected_bus_ids)
