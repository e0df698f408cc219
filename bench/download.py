# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Benchmark: hf_download throughput against a local Hub endpoint, and verification scaling.

Builds a ~1 GB repo of random shards (or reuses --root), serves it with
lab/hub_server.py on loopback, then prints:
  - download throughput (MB/s) of HfDownloader into an empty local_dir
    (includes in-stream hashing, fsync and rename; loopback, no throttle);
  - verification throughput (MB/s) of verify_files with 1 worker and with
    all cores, and of a full `reverify` run.
Page cache: the files were just written, so verification reads are warm unless
--drop-caches is given (root only). MB = 10^6 bytes.

  python bench/download.py [--size-mb 1024] [--shards 8] [--keep DIR] [--drop-caches]
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "collections"))
sys.path.insert(0, str(ROOT / "lab"))

import hub_server  # noqa: E402
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import (  # noqa: E402
    hf_download,
)

REPO = "bench/one-gb"


def build_repo(root: Path, size_mb: int, shards: int) -> int:
    repo = root / REPO
    repo.mkdir(parents=True, exist_ok=True)
    per = size_mb * 1_000_000 // shards
    total = 0
    for i in range(shards):
        path = repo / f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        if not path.exists() or path.stat().st_size != per:
            with path.open("wb") as f:
                left = per
                while left:
                    n = min(left, 16 * 1024 * 1024)
                    f.write(os.urandom(n))
                    left -= n
        total += per
    (repo / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}\n')
    return total


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def mbps(nbytes: int, seconds: float) -> float:
    return nbytes / 1e6 / seconds


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--keep", help="work directory to keep (reused on the next run)")
    ap.add_argument("--drop-caches", action="store_true", help="cold reads (root only)")
    args = ap.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-dl-"))
    cores = os.cpu_count() or 1
    try:
        t0 = time.monotonic()
        total = build_repo(work / "hub", args.size_mb, args.shards)
        print(f"repo: {args.shards} shards, {total} bytes, built in {time.monotonic() - t0:.1f} s")
        server, url = hub_server.start_in_thread(work / "hub")
        # Warm the server's own hash cache so it is not timed.
        server.index.files(work / "hub" / REPO)
        local = work / "local"
        shutil.rmtree(local, ignore_errors=True)

        def downloader(**kw):
            return hf_download.HfDownloader(
                repo_id=REPO,
                local_dir=str(local),
                endpoint=url,
                margin_bytes=0,
                max_workers=kw.pop("max_workers", cores),
                **kw,
            )

        t0 = time.monotonic()
        r = downloader().run()
        dt = time.monotonic() - t0
        print(
            f"download: {r['bytes_downloaded']} bytes in {dt:.2f} s = "
            f"{mbps(r['bytes_downloaded'], dt):.0f} MB/s "
            f"(max_workers={cores}, hashing in-stream, loopback)"
        )

        api = downloader()
        api.hub = hf_download.import_hub()
        _unused, remote = api.resolve()
        pairs = [(rf, str(local / rf.path)) for rf in remote]
        nbytes = sum(rf.size for rf in remote)
        for workers in sorted({1, cores}):
            if args.drop_caches:
                drop_caches()
            t0 = time.monotonic()
            got = hf_download.verify_files(pairs, workers)
            dt = time.monotonic() - t0
            bad = [rf.path for rf in remote if got[rf.path] != rf.expected]
            print(
                f"verify: {workers} worker(s): {nbytes} bytes in {dt:.2f} s = "
                f"{mbps(nbytes, dt):.0f} MB/s{' MISMATCH ' + str(bad) if bad else ''}"
            )
        if args.drop_caches:
            drop_caches()
        t0 = time.monotonic()
        r = downloader(reverify=True).run()
        dt = time.monotonic() - t0
        print(
            f"reverify run (resolve + hash all, {cores} workers): {dt:.2f} s = "
            f"{mbps(nbytes, dt):.0f} MB/s, changed={r['changed']}"
        )
        t0 = time.monotonic()
        r = downloader().run()
        print(
            f"second run (manifest trusted): {time.monotonic() - t0:.2f} s, changed={r['changed']}"
        )
        print(f"cores: {cores}; page cache: {'dropped' if args.drop_caches else 'warm'}")
        server.shutdown()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
