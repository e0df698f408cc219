#!/usr/bin/python
# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: hf_download
short_description: Resumable, verified download of a Hugging Face model repo
version_added: "0.1.0"
description:
  - Resolves O(revision) to its commit sha with huggingface_hub, fetches every file of the repo
    (filtered by O(allow_patterns) / O(ignore_patterns)) into O(local_dir) with HTTP Range into a
    stable per-file partial under C(<local_dir>/.cache/vllm-fleet/partial/), so a killed run
    resumes inside the file. A server that answers a Range request with the whole file (200)
    restarts the partial from byte 0; a server whose answer is longer or shorter than the size
    the Hub lists fails the task naming the file and both sizes, before writing that answer.
  - Retries 5xx answers and connection errors with exponential backoff.
  - A 429 that gives the Hub's rate-limit reset (the IETF C(RateLimit) header the Hub sends,
    C("api";r=0;t=55), else C(Retry-After) in seconds or as an HTTP date) is waited out, the
    reset plus 1 s as huggingface_hub does, without spending one of O(retries), while the time
    waited for rate limits stays within O(rate_limit_wait_max); a reset beyond it fails at once
    naming the header and the bound, partial files kept for the next run. A 429 without a reset
    is retried with backoff.
  - Verifies every file's size and sha256 (LFS files) or git blob id (others) against the Hub's
    metadata at that revision; a mismatching file is deleted and fetched once more, then the task
    fails naming it. Never returns ok with a missing or short file.
  - Writes C(.vllm-fleet-manifest.json) next to the model so a later run trusts unchanged files
    (same size and mtime) without re-hashing unless O(reverify=true).
  - Takes a lock per model directory; a second run waits for the first, then finds the files
    verified.
  - Removes orphaned C(*.incomplete) files that huggingface_hub leaves after a kill.
  - Fails before the first byte when the filesystem lacks the bytes still to download plus
    O(margin_bytes).
  - Needs huggingface_hub, importable by the host's interpreter or installed in the virtualenv
    O(hub_venv) made by that same interpreter (its site-packages joins the import path).
  - In check mode on a host where huggingface_hub cannot be imported yet (before the first
    download made the tools virtualenv), the plan is an estimate from O(size_hint_bytes) less the
    bytes already under O(local_dir), and says so (RV(estimated)).
author:
  - vllm-fleet maintainers (@vllm-fleet)
options:
  repo_id:
    description: Repository id, C(org/name).
    type: str
    required: true
  revision:
    description: Branch, tag or 40-hex commit sha. The resolved sha is what gets recorded.
    type: str
    default: main
  local_dir:
    description:
      - Directory the files land in (created if missing).
      - With O(snapshots=true), the repo's base folder; the files of the resolved commit land in
        C(<local_dir>/snapshots/<commit sha>/) (RV(model_dir)).
    type: path
    required: true
  snapshots:
    description:
      - One folder per commit, C(<local_dir>/snapshots/<commit sha>/), so the files of two
        revisions never mix (a loader following an index file cannot pick up another
        revision's shards). Earlier commits' folders are left as they are (see
        M(vllm_fleet.fleet.model_revisions) for retention).
      - A file the new commit shares with a verified file of another commit under O(local_dir)
        (same hash and size, per that folder's manifest and unchanged since) is hard-linked,
        not fetched again; files of the flat layout (O(snapshots=false)) count too, so moving
        to this layout costs no download.
    type: bool
    default: false
  allow_patterns:
    description: Glob patterns of files to fetch (huggingface_hub semantics). All files if unset.
    type: list
    elements: str
  ignore_patterns:
    description: Glob patterns of files to skip.
    type: list
    elements: str
  endpoint:
    description: Hub endpoint (a mirror), like C(HF_ENDPOINT). Defaults to huggingface_hub's.
    type: str
  token:
    description: Hugging Face token. Never logged.
    type: str
  token_file:
    description: File whose first line is the token (keep it mode 0600).
    type: path
  hf_home:
    description: HF_HOME for huggingface_hub (token lookup, cache whose orphans are cleaned).
    type: path
  reverify:
    description: Hash every file again even when the manifest vouches for it.
    type: bool
    default: false
  max_workers:
    description: Files fetched and hashed in parallel.
    type: int
    default: 8
  retries:
    description: Retries per file (and per metadata call) on 5xx or connection errors (a 429
      that gives its reset waits instead, see O(rate_limit_wait_max)).
    type: int
    default: 5
  retry_backoff:
    description: First backoff in seconds; doubles each retry, capped at 60.
    type: float
    default: 2.0
  rate_limit_wait_max:
    description:
      - Longest total time, in seconds, the run waits for the Hub's rate-limit resets (wall
        clock; parallel files waiting for the same reset count once). A 429 whose reset would
        take the total beyond it fails at once.
      - The Hub counts its quotas over 5-minute fixed windows, so one reset is at most 300 s;
        the default waits out two windows.
      - C(0) never waits for a reset.
    type: float
    default: 600
  progress_file:
    description: JSON file rewritten every O(progress_interval) seconds with bytes done/total,
      rate (bytes/s) and ETA (seconds), the wait for a rate-limit reset going on
      (C(rate_limited)) and the time waited for them (C(rate_limit_waited_seconds)).
    type: path
  progress_interval:
    description: Seconds between progress file writes.
    type: float
    default: 10.0
  margin_bytes:
    description: Free bytes to keep on the filesystem beyond what the download needs.
    type: int
    default: 1073741824
  hub_venv:
    description: A virtualenv holding huggingface_hub, made by the Python that runs this module.
    type: path
  size_hint_bytes:
    description: Expected size of the download in bytes (the catalog's), for the check-mode estimate
      when huggingface_hub cannot be imported; unset, check mode then fails like a real run.
    type: int
  shared_volume:
    description:
      - The models volume is mounted by other hosts too (C(vllm_fleet_models_volume)). The run
        then takes a lease file, C(<local_dir>/.cache/vllm-fleet/lease), besides flock, made
        with C(O_EXCL) and renewed every O(lease_s)/4 seconds, it keeps stagers on different
        hosts apart where flock holds only on one host (NFS with C(local_lock), BeeGFS's
        default, FUSE). A volume without flock (Lustre without C(-o flock)) gets the lease
        file whether or not this is set.
    type: bool
    default: false
  lease_s:
    description:
      - Seconds a lease may go unrenewed before a waiting host takes it over (its holder
        died without removing it). Measured on the waiter's own clock; a holder of this host
        whose process is gone is taken over at once.
    type: float
    default: 60.0
  lease_wait_s:
    description:
      - Seconds to wait for a lease another host holds and renews; past them the run fails
        naming the holder (host, pid, since). A holder renews only while its own work moves
        (bytes fetched or hashed within O(lease_stall_s)), so a hung holder's lease expires
        after O(lease_stall_s) + O(lease_s) and is taken over before this bound.
    type: float
    default: 14400.0
  lease_stall_s:
    description:
      - Seconds without progress (no byte fetched, copied or hashed) after which this run
        stops renewing its lease, so that another host may take it over.
    type: float
    default: 900.0
  keep_revisions:
    description:
      - Commit shas whose partial files are kept although this run does not download them
        (another catalog entry pins them; its download resumes them). The partials of every
        other revision are orphans (O(snapshots=true)).
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    description: Resolves the revision, hashes unverified local files and reports the bytes that
      would be fetched; writes nothing (no folder, no lock file). It probes flock read-only
      (a shared lock on the folder); whether hard links work is known from the filesystem
      type or an earlier run's try, else the reused files are counted as copies.
  diff_mode:
    support: full
    description: Shows the recorded revision and the files to fetch before and after.
notes:
  - Check mode reads local files to hash them when the manifest does not vouch for them.
"""

EXAMPLES = r"""
- name: Download MiniMax-M2.5 NVFP4 into the models root
  vllm_fleet.fleet.hf_download:
    repo_id: nvidia/MiniMax-M2.5-NVFP4
    revision: main
    local_dir: /srv/models/nvidia--MiniMax-M2.5-NVFP4
    token_file: /etc/vllm-fleet/hf_token
    hub_venv: /opt/vllm-fleet/tools
    hf_home: /srv/models/.hf
    allow_patterns: ["*.json", "*.safetensors", "*.py", "tokenizer*"]
    snapshots: true
    progress_file: /run/vllm-fleet/download-minimax.json
  async: 86400
  poll: 30

- name: Report what a download would fetch
  vllm_fleet.fleet.hf_download:
    repo_id: org/tiny-llama
    local_dir: /srv/models/org--tiny-llama
    endpoint: http://127.0.0.1:8765
  check_mode: true
  register: plan
"""

RETURN = r"""
estimated:
  description: True when the figures are an estimate from O(size_hint_bytes) (check mode without
    huggingface_hub); the revision is then not resolved (null).
  type: bool
  returned: success
changed:
  description: True only when bytes were fetched, files replaced or linked, or orphans removed.
  type: bool
  returned: always
revision:
  description: Commit sha the revision resolved to.
  type: str
  returned: success
  sample: 2f3c8a1e5b7d9c0a4e6f8b1d3c5a7e9f0b2d4c6a
files:
  description: Number of files of the repo (after patterns).
  type: int
  returned: success
bytes_total:
  description: Sum of the files' sizes, in bytes.
  type: int
  returned: success
bytes_downloaded:
  description: Body bytes received in this run, in bytes (0 in check mode).
  type: int
  returned: success
bytes_to_download:
  description: Bytes still missing when the run started (partials counted as present), in bytes.
  type: int
  returned: success
files_to_fetch:
  description: Files that were (or in check mode would be) fetched.
  type: list
  elements: str
  returned: success
files_to_reuse:
  description: Files hard-linked (in check mode, to be linked) from another verified commit's
    folder instead of fetched (O(snapshots=true) only).
  type: list
  elements: str
  returned: success
bytes_reused:
  description: Bytes of RV(files_to_reuse), in bytes (not downloaded, no new disk space).
  type: int
  returned: success
model_dir:
  description: Folder holding the resolved commit's files (O(local_dir) itself without
    O(snapshots)); null when the revision could not be resolved (RV(estimated)).
  type: str
  returned: success
  sample: /srv/models/MiniMaxAI/MiniMax-M2.5/snapshots/2f3c8a1e5b7d9c0a4e6f8b1d3c5a7e9f0b2d4c6a
files_mismatched:
  description: Local files whose hash did not match and were replaced.
  type: list
  elements: str
  returned: success
orphans_removed:
  description: Orphaned partial files removed (would be, in check mode), before the disk check.
  type: list
  elements: str
  returned: success
bytes_orphaned:
  description: Bytes of RV(orphans_removed), in bytes; the disk check counts them as free.
  type: int
  returned: success
bytes_to_copy:
  description: Bytes of RV(files_to_reuse) copied instead of linked (the volume has no hard
    links, or they are not known to work), in bytes; counted in the disk check. Check mode
    tries a hard link as a real run does (in a temp folder it removes; not where the
    filesystem type or an earlier try says links fail), and a disk too small for the copies
    says so in RV(disk)'s message.
  type: int
  returned: success
volume:
  description: What the models volume gives the download.
  type: dict
  returned: success
  contains:
    mount_point:
      description: The mount holding the folder.
      type: str
    fstype:
      description: Its filesystem type (from /proc/self/mountinfo).
      type: str
    shared:
      description: O(shared_volume).
      type: bool
    flock:
      description: C(ok), or the error flock answered to a read-only probe.
      type: str
    lock_scope:
      description: Where flock holds, C(host-only-fs), C(hosts), C(this-host), C(none) or C(unknown).
      type: str
    lock_scope_why:
      description: Why, from the mount options or the filesystem.
      type: str
    locks:
      description: The locks the run takes, C(flock) and or C(lease).
      type: list
      elements: str
    hard_links:
      description: Whether hard links work (null when not known).
      type: bool
    hard_links_from:
      description: C(tried here) (this run, check mode included, or an earlier run) or
        C(filesystem type).
      type: str
    hard_links_error:
      description: What link(2) answered when the try failed.
      type: str
      returned: when a hard link was tried and failed
    notes:
      description: What the user should know about this volume.
      type: list
      elements: str
  sample: {mount_point: /srv/models, fstype: nfs4, shared: true, flock: ok, lock_scope: this-host,
           locks: [flock, lease], hard_links: true, hard_links_from: filesystem type}
rate_limit_waited_seconds:
  description: Time the run waited for the Hub's rate-limit resets, in seconds (see
    O(rate_limit_wait_max)).
  type: float
  returned: success
  sample: 56.0
seconds:
  description: Wall time of the run, in seconds.
  type: float
  returned: always
manifest:
  description: Path of the manifest written next to the model.
  type: str
  returned: success
disk:
  description: Free-space check, bytes (need_bytes includes margin_bytes; free_bytes at path).
  type: dict
  returned: success
  sample: {path: /srv/models/x, need_bytes: 1073741824, free_bytes: 5368709120, ok: true}
"""

import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.hf_download import (
    DownloadError,
    HfDownloader,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "repo_id": {"type": "str", "required": True},
            "revision": {"type": "str", "default": "main"},
            "local_dir": {"type": "path", "required": True},
            "allow_patterns": {"type": "list", "elements": "str"},
            "ignore_patterns": {"type": "list", "elements": "str"},
            "endpoint": {"type": "str"},
            "token": {"type": "str", "no_log": True},
            "token_file": {"type": "path"},
            "hf_home": {"type": "path"},
            "reverify": {"type": "bool", "default": False},
            "max_workers": {"type": "int", "default": 8},
            "retries": {"type": "int", "default": 5},
            "retry_backoff": {"type": "float", "default": 2.0},
            "rate_limit_wait_max": {"type": "float", "default": 600.0},
            "progress_file": {"type": "path"},
            "progress_interval": {"type": "float", "default": 10.0},
            "margin_bytes": {"type": "int", "default": 1073741824},
            "hub_venv": {"type": "path"},
            "size_hint_bytes": {"type": "int"},
            "snapshots": {"type": "bool", "default": False},
            "shared_volume": {"type": "bool", "default": False},
            "lease_s": {"type": "float", "default": 60.0},
            "lease_wait_s": {"type": "float", "default": 14400.0},
            "lease_stall_s": {"type": "float", "default": 900.0},
            "keep_revisions": {"type": "list", "elements": "str", "default": []},
        },
        mutually_exclusive=[("token", "token_file")],
        supports_check_mode=True,
    )
    p = module.params
    if p["rate_limit_wait_max"] < 0:
        module.fail_json(msg="rate_limit_wait_max must be 0 or more seconds, got %s"
                         % p["rate_limit_wait_max"])
    try:
        downloader = HfDownloader.from_module(p, check_mode=module.check_mode)
        result = downloader.run()
    except DownloadError as e:
        module.fail_json(msg=e.msg, repo_id=p["repo_id"], revision=p["revision"], **e.fields)
    except Exception as e:  # noqa: BLE001 - any other failure becomes a one-line fail_json
        module.fail_json(
            msg="hf_download of %s@%s failed: %s: %s"
            % (p["repo_id"], p["revision"], type(e).__name__, e),
            exception=traceback.format_exc(),
        )
    if not module._diff:  # noqa: SLF001 - AnsibleModule exposes diff mode only as _diff
        result.pop("diff", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
