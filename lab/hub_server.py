# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""A small Hugging Face Hub-compatible HTTP server for the lab and the tests.

LAB / TEST FIXTURE, NOT PRODUCT CODE. It serves model repositories laid out
as plain directories, ``<root>/<org>/<name>/<files...>``, with just enough of
the Hub's HTTP API for huggingface_hub 2.4 (snapshot_download,
hf_hub_download, model_info(files_metadata=True), list_repo_tree,
get_paths_info, HfApi.verify_repo_checksums) and for our own byte-range
downloader (plugins/module_utils/download/hf_download.py):

  GET  /api/models/{repo}[/revision/{rev}][?blobs=true]
  GET  /api/models/{repo}/tree/{rev}[/{path}][?recursive=true]
  POST /api/models/{repo}/paths-info/{rev}          (form or JSON "paths")
  HEAD/GET /{repo}/resolve/{rev}/{path}             (HTTP Range, 206/416)

Revisions: ``main``, the repo's commit sha (sha1 over the sorted (path, oid)
pairs, so it changes when any file changes) and any tag listed one per line
in ``<repo>/.tags`` all name the main tree, the repo's files outside
``.revisions/``. A repo may hold more revisions as complete file trees in
``<repo>/.revisions/<label>/`` (a label starting with "." is skipped, so a
tree can be built under a dot name and renamed into place): the label or the
tree's own commit sha (same scheme) names that tree, and every endpoint then
serves its files and its sha (X-Repo-Commit, ETags, siblings, tree,
paths-info); main, its sha and the tags win over a label of the same name.
Any other revision answers 404 RevisionNotFound. ``.gated`` and ``.tags``
are read from the repo's top folder only and apply to every revision; fault
globs still match "<org>/<name>/<path>" and "<path>". Files of 1 MiB or more
and ``*.safetensors`` are "LFS": their ETag is the content sha256 and tree
entries carry ``lfs: {oid, size, pointerSize}``; other files carry the git
blob id. A ``.gated`` file in a repo makes file downloads answer 401
GatedRepo unless an ``Authorization: Bearer <token>`` header is sent (if
``.gated`` holds a token, only that token is accepted; another gets 403).

Fault injection (CLI flags, ``HUB_SERVER_FAULTS`` JSON in the environment,
or ``POST /_faults`` with a JSON body; ``GET /_faults`` reads them back):

  throttle_bps   int    body bytes per second per response (0 = unlimited)
  fail_file      {glob: {"count": N, "status": 503}}  N = -1: always.
                 glob is matched against "<org>/<name>/<path>" and "<path>".
  fail_revision  {"count": N, "status": 500}   the /api/models/{repo}[/revision] call
  fail_tree      {"count": N, "status": 500}   tree and paths-info calls
  drop_after     {glob: {"bytes": B, "count": N}}  close the socket after B body bytes
  hold_after     {glob: {"bytes": B, "count": N, "then": "continue"}}  stop after B body bytes
                 until released (POST /_release, or a reset), then go on, or with
                 "then": "drop" close the connection; ``held`` in the stats lists the
                 files stopped now, so a test can act at that point without timing
  ignore_range   {glob: {"count": N}}   answer a GET that has a Range header with 200 and
                 the whole body, as a server or proxy without range support does
  extra_bytes    {glob: {"bytes": B, "count": N, "announce": true}}  B bytes more than the
                 file holds after its body, as a server whose file is longer than the listing
                 says; Content-Length and Content-Range count them, or with "announce": false
                 the body has no length header and ends when the connection closes

  revoked_tokens [token, ...]  a request with such a bearer token is answered 401
                 "Invalid credentials in Authorization header", as the Hub answers a revoked
                 or mistyped token on every route
  tree_alias     {listed path: real path}  the tree listing also names each listed path
                 (``../x``, ``/abs/x``, anything) with the real file's size and hashes, as a
                 hostile mirror or proxy may; the client must refuse such a listing

  rate_limit_file {glob: {"count": N, "reset": T, "header": "ratelimit"}}  answer the first N
                 GETs of a file 429 as the Hub does when a quota is spent: IETF
                 ``RateLimit: "resolvers";r=0;t=T`` and ``RateLimit-Policy: "fixed
                 window";"resolvers";q=5000;w=300`` (huggingface/hub-docs
                 docs/hub/rate-limits.md), then serve normally; "header": "retry-after"
                 sends ``Retry-After: T`` instead, "retry-after-date" an HTTP date T s
                 ahead, "none" no reset at all
  rate_limit_api {"count": N, "reset": T, "header": ...}  the same for the first N API calls
                 (revision, tree and paths-info alike), with the "api" quota (q=500)

``GET /_stats`` returns body bytes sent per file, request counts, the Range
headers seen and the files held; ``POST /_release`` lets held files go on;
``POST /_reset`` releases them and clears stats and faults.

CLI: python lab/hub_server.py --root DIR --host 127.0.0.1 --port 8765 [--pidfile F]
Binds loopback only. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

LFS_THRESHOLD = 1024 * 1024
CHUNK = 64 * 1024
CONTROL_FILES = {".gated", ".tags"}
REVISIONS_DIR = ".revisions"
SKIP_DIRS = {".git", ".cache", REVISIONS_DIR}
LOOPBACK = {"127.0.0.1", "::1", "localhost"}
# Docker's bridges on the controller: the lab network's gateway address (lab/network.sh).
BRIDGE_PREFIXES = ("br-", "docker")


def bridge_addresses() -> set[str]:
    """IPv4 addresses of the controller's Docker bridge interfaces (from `ip -o -4 addr`)."""
    try:
        argv = ["ip", "-o", "-4", "addr", "show"]
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return set()
    found = set()
    for line in out.splitlines():
        parts = line.split()
        # "4: br-1a2b    inet 172.31.250.1/24 brd ... scope global br-1a2b"
        if parts[2:3] == ["inet"] and parts[1].startswith(BRIDGE_PREFIXES) and parts[3:]:
            found.add(parts[3].split("/")[0])
    return found


_RANGE_RE = re.compile(r"^bytes=(\d*)-(\d*)$")


def is_lfs(path: str, size: int) -> bool:
    return size >= LFS_THRESHOLD or path.endswith(".safetensors")


def _hash_file(fpath: Path, lfs: bool) -> str:
    size = fpath.stat().st_size
    h = hashlib.sha256() if lfs else hashlib.sha1()  # noqa: S324 - git blob ids are sha1
    if not lfs:
        h.update(f"blob {size}\0".encode())
    with fpath.open("rb") as f:
        while chunk := f.read(1024 * 1024):
            h.update(chunk)
    return h.hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    spec = "https://git-lfs.github.com/spec/v1"
    return f"version {spec}\noid sha256:{sha256}\nsize {size}\n".encode()


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324


class RepoIndex:
    """File metadata of every repo, recomputed only for files whose (size, mtime) changed."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._cache: dict[str, tuple[tuple[int, int], dict]] = {}
        self._lock = threading.Lock()

    def repo_dir(self, repo_id: str) -> Path | None:
        parts = repo_id.split("/")
        if len(parts) != 2 or any(p in {"", ".", ".."} or p.startswith(".") for p in parts):  # noqa: PLR2004
            return None
        d = self.root / parts[0] / parts[1]
        return d if d.is_dir() else None

    def _entry(self, fpath: Path, rel: str) -> dict:
        st = fpath.stat()
        key = str(fpath)
        stamp = (st.st_size, st.st_mtime_ns)
        with self._lock:
            cached = self._cache.get(key)
        if cached and cached[0] == stamp:
            return cached[1]
        lfs = is_lfs(rel, st.st_size)
        digest = _hash_file(fpath, lfs)
        entry = {"path": rel, "size": st.st_size}
        if lfs:
            pointer = lfs_pointer(digest, st.st_size)
            entry["oid"] = git_blob_id(pointer)
            entry["lfs"] = {"oid": digest, "size": st.st_size, "pointerSize": len(pointer)}
            entry["etag"] = digest
        else:
            entry["oid"] = digest
            entry["etag"] = digest
        with self._lock:
            self._cache[key] = (stamp, entry)
        return entry

    def files(self, repo_dir: Path) -> dict[str, dict]:
        out = {}
        for dirpath, dirnames, filenames in os.walk(repo_dir):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for name in sorted(filenames):
                fpath = Path(dirpath) / name
                rel = fpath.relative_to(repo_dir).as_posix()
                if rel in CONTROL_FILES:
                    continue
                out[rel] = self._entry(fpath, rel)
        return out

    @staticmethod
    def commit_sha(files: dict[str, dict]) -> str:
        h = hashlib.sha1()  # noqa: S324 - a git-like commit id, not security
        for path in sorted(files):
            h.update(f"{path}\0{files[path]['oid']}\n".encode())
        return h.hexdigest()

    @staticmethod
    def revision_dirs(repo_dir: Path) -> dict[str, Path]:
        """{label: tree} of the extra revisions in <repo>/.revisions/ (dot names skipped)."""
        rev_root = repo_dir / REVISIONS_DIR
        if not rev_root.is_dir():
            return {}
        trees = sorted(d for d in rev_root.iterdir() if d.is_dir())
        return {d.name: d for d in trees if not d.name.startswith(".")}

    def resolve(self, repo_dir: Path, rev: str) -> tuple[Path, dict, str] | None:
        """(tree folder, files, commit sha) a revision names in a repo, or None."""
        files = self.files(repo_dir)
        sha = self.commit_sha(files)
        if rev in {"main", sha} | self.tags(repo_dir):
            return repo_dir, files, sha
        trees = self.revision_dirs(repo_dir)
        if rev in trees:
            files = self.files(trees[rev])
            return trees[rev], files, self.commit_sha(files)
        for tree in trees.values():
            files = self.files(tree)
            sha = self.commit_sha(files)
            if rev == sha:
                return tree, files, sha
        return None

    @staticmethod
    def tags(repo_dir: Path) -> set[str]:
        tag_file = repo_dir / ".tags"
        if not tag_file.is_file():
            return set()
        return {t.strip() for t in tag_file.read_text().splitlines() if t.strip()}


class Faults:
    """Fault-injection settings and per-file counters, shared by all handler threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.go_on = threading.Event()
        self.reset()

    def release(self) -> None:
        """Let every held body go on (holds set later wait for the next release)."""
        with self.lock:
            go_on, self.go_on = self.go_on, threading.Event()
        go_on.set()

    def reset(self) -> None:
        self.release()
        with self.lock:
            self.throttle_bps = 0
            self.fail_file: dict[str, dict] = {}
            self.fail_revision: dict = {}
            self.fail_tree: dict = {}
            self.rate_limit_file: dict[str, dict] = {}
            self.rate_limit_api: dict = {}
            self.drop_after: dict[str, dict] = {}
            self.hold_after: dict[str, dict] = {}
            self.held: list[str] = []
            self.ignore_range: dict[str, dict] = {}
            self.extra_bytes: dict[str, dict] = {}
            self.tree_alias: dict[str, str] = {}
            self.revoked_tokens: list[str] = []
            self.bytes_sent: dict[str, int] = {}
            self.requests: dict[str, int] = {}
            self.ranges: list[dict] = []
            self.faults_fired: list[dict] = []

    def update(self, cfg: dict) -> None:
        with self.lock:
            if "throttle_bps" in cfg:
                self.throttle_bps = int(cfg["throttle_bps"] or 0)
            for name in ("fail_file", "drop_after", "hold_after", "ignore_range", "extra_bytes",
                         "rate_limit_file"):
                if name in cfg:
                    setattr(self, name, {k: dict(v) for k, v in (cfg[name] or {}).items()})
            for name in ("fail_revision", "fail_tree", "rate_limit_api", "tree_alias"):
                if name in cfg:
                    setattr(self, name, dict(cfg[name] or {}))
            if "revoked_tokens" in cfg:
                self.revoked_tokens = list(cfg["revoked_tokens"] or [])

    def config(self) -> dict:
        with self.lock:
            return {
                "throttle_bps": self.throttle_bps,
                "fail_file": self.fail_file,
                "fail_revision": self.fail_revision,
                "fail_tree": self.fail_tree,
                "rate_limit_file": self.rate_limit_file,
                "rate_limit_api": self.rate_limit_api,
                "drop_after": self.drop_after,
                "hold_after": self.hold_after,
                "ignore_range": self.ignore_range,
                "extra_bytes": self.extra_bytes,
                "tree_alias": self.tree_alias,
                "revoked_tokens": self.revoked_tokens,
            }

    def stats(self) -> dict:
        with self.lock:
            return {
                "bytes_sent": dict(self.bytes_sent),
                "requests": dict(self.requests),
                "ranges": list(self.ranges),
                "faults_fired": list(self.faults_fired),
                "held": list(self.held),
            }

    @staticmethod
    def _take(rule: dict) -> bool:
        """Consume one firing of a rule with a count (-1 = always)."""
        count = int(rule.get("count", -1))
        if count == 0:
            return False
        if count > 0:
            rule["count"] = count - 1
        return True

    @staticmethod
    def _match(table: dict, key: str, rel: str) -> dict | None:
        for pattern, rule in table.items():
            if fnmatch.fnmatchcase(key, pattern) or fnmatch.fnmatchcase(rel, pattern):
                return rule
        return None

    def file_failure(self, key: str, rel: str) -> int | None:
        with self.lock:
            rule = self._match(self.fail_file, key, rel)
            if rule and self._take(rule):
                self.faults_fired.append({"fault": "fail_file", "file": key})
                return int(rule.get("status", 503))
        return None

    def api_failure(self, which: str) -> int | None:
        with self.lock:
            rule = getattr(self, which)
            if rule and self._take(rule):
                self.faults_fired.append({"fault": which})
                return int(rule.get("status", 500))
        return None

    def rate_limited(self, key: str | None, rel: str | None) -> dict | None:
        """The 429's headers when a rate_limit_file (key given) or rate_limit_api rule fires."""
        with self.lock:
            if key is None:
                rule, bucket, quota = self.rate_limit_api, "api", 500
            else:
                rule = self._match(self.rate_limit_file, key, rel)
                bucket, quota = "resolvers", 5000
            if not rule or not self._take(rule):
                return None
            self.faults_fired.append({"fault": "rate_limit_" + ("file" if key else "api"),
                                      "file": key})
            reset = int(rule.get("reset", 60))
            how = rule.get("header", "ratelimit")
        if how == "retry-after":
            return {"Retry-After": str(reset)}
        if how == "retry-after-date":
            return {"Retry-After": formatdate(time.time() + reset, usegmt=True)}
        if how == "none":
            return {}
        return {
            "RateLimit": f'"{bucket}";r=0;t={reset}',
            "RateLimit-Policy": f'"fixed window";"{bucket}";q={quota};w=300',
        }

    def drop_limit(self, key: str, rel: str) -> int | None:
        with self.lock:
            rule = self._match(self.drop_after, key, rel)
            if rule and self._take(rule):
                self.faults_fired.append({"fault": "drop_after", "file": key})
                return int(rule.get("bytes", 0))
        return None

    def hold_limit(self, key: str, rel: str) -> tuple[int, bool, threading.Event] | None:
        """(bytes before the hold, drop after it, the release to wait for) or None."""
        with self.lock:
            rule = self._match(self.hold_after, key, rel)
            if rule and self._take(rule):
                drop = rule.get("then", "continue") == "drop"
                return int(rule.get("bytes", 0)), drop, self.go_on
        return None

    def hold(self, key: str, go_on: threading.Event) -> None:
        with self.lock:
            self.faults_fired.append({"fault": "hold_after", "file": key})
            self.held.append(key)
        go_on.wait()
        with self.lock:
            if key in self.held:  # a reset in between starts a new list
                self.held.remove(key)

    def range_ignored(self, key: str, rel: str) -> bool:
        with self.lock:
            rule = self._match(self.ignore_range, key, rel)
            if rule and self._take(rule):
                self.faults_fired.append({"fault": "ignore_range", "file": key})
                return True
        return False

    def extra_length(self, key: str, rel: str) -> tuple[int, bool]:
        """(bytes to send past the end of the file, whether the headers announce them)."""
        with self.lock:
            rule = self._match(self.extra_bytes, key, rel)
            if rule and self._take(rule):
                self.faults_fired.append({"fault": "extra_bytes", "file": key})
                return int(rule.get("bytes", 0)), bool(rule.get("announce", True))
        return 0, True

    def count_request(self, key: str, rng: str | None) -> None:
        with self.lock:
            self.requests[key] = self.requests.get(key, 0) + 1
            self.ranges.append({"file": key, "range": rng})

    def ledger(self) -> dict:
        """The byte counts a stream starting now adds to (a reset starts new ones)."""
        with self.lock:
            return self.bytes_sent

    def add_bytes(self, key: str, n: int, ledger: dict | None = None) -> None:
        """Count `n` bytes of `key` (negative: take back a write the client did not take).

        With `ledger` (from ledger() when the stream began), only while no reset has
        happened since: a stream left from before a reset (an earlier test's, still
        writing to a client that went away) counts nothing after it. Taking back after
        the reset a write counted before it made a file's count negative (-65426 =
        110 - 65536 in a CI run of test_range_requests_and_byte_counter).
        """
        with self.lock:
            if ledger is not None and ledger is not self.bytes_sent:
                return
            self.bytes_sent[key] = self.bytes_sent.get(key, 0) + n


class HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "vllm-fleet-lab-hub/1"

    # Set on the class by make_server().
    index: RepoIndex
    faults: Faults

    def log_message(self, fmt, *args) -> None:
        if os.environ.get("HUB_SERVER_VERBOSE"):
            super().log_message(fmt, *args)

    def handle(self) -> None:
        # A client that resets its kept connection (killed, or done) is not an error here.
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            super().handle()

    # ---- responses -------------------------------------------------------
    def _send(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _json(self, obj, status: int = 200, headers: dict | None = None) -> None:
        headers = {"Content-Type": "application/json", **(headers or {})}
        self._send(status, json.dumps(obj).encode(), headers)

    def _error(self, status: int, code: str | None, message: str,
               extra: dict | None = None) -> None:
        headers = {"X-Error-Message": message, **(extra or {})}
        if code:
            headers["X-Error-Code"] = code
        self._json({"error": message}, status=status, headers=headers)

    # ---- routing ---------------------------------------------------------
    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _route(self) -> None:
        try:
            self._dispatch()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        path = url.path
        if path.startswith("/_"):
            return self._control(path)
        auth = self.headers.get("Authorization", "")
        with self.faults.lock:
            revoked = auth.startswith("Bearer ") and auth[len("Bearer "):].strip() in \
                self.faults.revoked_tokens
        if revoked:
            return self._error(401, None, "Invalid credentials in Authorization header")
        if path.startswith("/api/models/"):
            return self._api(path[len("/api/models/") :], query)
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if m and self.command in {"GET", "HEAD"}:
            return self._resolve(unquote(m.group(1)), unquote(m.group(2)), unquote(m.group(3)))
        return self._error(404, None, f"No route for {self.command} {path}")

    def _control(self, path: str) -> None:
        """The test-only endpoints: stats, faults, release, reset."""
        if path == "/_stats":
            return self._json(self.faults.stats())
        if path == "/_faults":
            if self.command == "POST":
                self.faults.update(json.loads(self._read_body() or b"{}"))
            return self._json(self.faults.config())
        if path == "/_release" and self.command == "POST":
            self.faults.release()
            return self._json({"released": True})
        if path == "/_reset" and self.command == "POST":
            self.faults.reset()
            return self._json({"reset": True})
        return self._error(404, None, f"No route for {self.command} {path}")

    def _repo(self, repo_id: str, rev: str) -> tuple[Path, Path, dict, str] | None:
        """(repo folder, the revision's tree, its files, its sha); None once a 404 is sent."""
        repo_dir = self.index.repo_dir(repo_id)
        if repo_dir is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        found = self.index.resolve(repo_dir, rev)
        if found is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return None
        return repo_dir, *found

    def _api(self, rest: str, query: dict) -> None:  # noqa: C901, PLR0911
        parts = rest.split("/")
        if len(parts) < 2:  # noqa: PLR2004
            return self._error(404, "RepoNotFound", "Repository not found")
        repo_id = unquote(parts[0]) + "/" + unquote(parts[1])
        tail = parts[2:]
        limited = self.faults.rate_limited(None, None)
        if limited is not None:
            return self._error(429, None, "Injected rate limit (API)", limited)
        if not tail or tail[0] == "revision":
            if self.command != "GET":
                return self._error(405, None, "Method not allowed")
            rev = unquote(tail[1]) if len(tail) > 1 else "main"
            status = self.faults.api_failure("fail_revision")
            if status:
                return self._error(status, None, "Injected revision API failure")
            found = self._repo(repo_id, rev)
            if found is None:
                return None
            repo_dir, _tree, files, sha = found
            blobs = "true" in query.get("blobs", [])
            return self._model_info(repo_id, repo_dir, files, sha, blobs=blobs)
        if tail[0] in {"tree", "paths-info"} and len(tail) > 1:
            status = self.faults.api_failure("fail_tree")
            if status:
                return self._error(status, None, "Injected tree API failure")
            found = self._repo(repo_id, unquote(tail[1]))
            if found is None:
                return None
            _repo_dir, _tree, files, _sha = found
            if tail[0] == "tree":
                sub = unquote("/".join(tail[2:])).strip("/")
                recursive = query.get("recursive", ["false"])[0].lower() in {"true", "1"}
                return self._tree(files, sub, recursive)
            if self.command != "POST":
                return self._error(405, None, "Method not allowed")
            return self._paths_info(files)
        return self._error(404, None, f"Unknown API path {rest}")

    @staticmethod
    def _file_obj(entry: dict) -> dict:
        obj = {"type": "file", "oid": entry["oid"], "size": entry["size"], "path": entry["path"]}
        if "lfs" in entry:
            obj["lfs"] = dict(entry["lfs"])
        return obj

    @staticmethod
    def _dirs(files: dict) -> set[str]:
        dirs = set()
        for p in files:
            parts = p.split("/")[:-1]
            dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
        return dirs

    def _dir_obj(self, d: str, files: dict) -> dict:
        h = hashlib.sha1()  # noqa: S324
        for p in sorted(f for f in files if f.startswith(d + "/")):
            h.update(f"{p}\0{files[p]['oid']}\n".encode())
        return {"type": "directory", "oid": h.hexdigest(), "size": 0, "path": d}

    def _model_info(self, repo_id, repo_dir, files, sha, blobs: bool) -> None:
        siblings = []
        for path in sorted(files):
            sib = {"rfilename": path}
            if blobs:
                e = files[path]
                sib["size"] = e["size"]
                sib["blobId"] = e["oid"]
                if "lfs" in e:
                    sib["lfs"] = {
                        "sha256": e["lfs"]["oid"],
                        "size": e["lfs"]["size"],
                        "pointerSize": e["lfs"]["pointerSize"],
                    }
            siblings.append(sib)
        gated = (repo_dir / ".gated").exists()
        self._json(
            {
                "_id": sha[:24],
                "id": repo_id,
                "modelId": repo_id,
                "author": repo_id.split("/")[0],
                "sha": sha,
                "private": False,
                "gated": "manual" if gated else False,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "siblings": siblings,
                "usedStorage": sum(e["size"] for e in files.values()),
            }
        )

    def _tree(self, files: dict, sub: str, recursive: bool) -> None:
        dirs = self._dirs(files)
        if sub and sub not in dirs:
            if sub in files:
                return self._json([self._file_obj(files[sub])])
            return self._error(404, "EntryNotFound", f"{sub} does not exist on this revision")
        prefix = sub + "/" if sub else ""

        def wanted(p: str) -> bool:
            return p.startswith(prefix) and (recursive or "/" not in p[len(prefix) :])

        out = [self._dir_obj(d, files) for d in sorted(dirs) if wanted(d)]
        out += [self._file_obj(files[p]) for p in sorted(files) if wanted(p)]
        with self.faults.lock:
            aliases = dict(self.faults.tree_alias)
        for listed, real in sorted(aliases.items()):
            if real in files and recursive and not sub:
                out.append({**self._file_obj(files[real]), "path": listed})
        return self._json(out)

    def _paths_info(self, files: dict) -> None:
        raw = self._read_body()
        ctype = self.headers.get("Content-Type", "")
        if "json" in ctype:
            paths = json.loads(raw or b"{}").get("paths", [])
        else:
            paths = parse_qs(raw.decode()).get("paths", [])
        if isinstance(paths, str):
            paths = [paths]
        dirs = self._dirs(files)
        out = []
        for p in paths:
            p = p.strip("/")  # noqa: PLW2901
            if p in files:
                out.append(self._file_obj(files[p]))
            elif p in dirs:
                out.append(self._dir_obj(p, files))
        return self._json(out)

    # ---- file bodies -----------------------------------------------------
    def _auth_error(self, repo_dir: Path) -> bool:
        gate = repo_dir / ".gated"
        if not gate.exists():
            return False
        auth = self.headers.get("Authorization", "")
        token = auth[len("Bearer ") :].strip() if auth.startswith("Bearer ") else ""
        wanted = gate.read_text().strip()
        if not token:
            self._error(
                401,
                "GatedRepo",
                "Access to this model is restricted. You must have access to it "
                "and be authenticated to access it. Please log in.",
            )
            return True
        if wanted and token != wanted:
            self._error(403, None, "Your token does not have access to this gated repo")
            return True
        return False

    def _span(self, size: int, rng: str | None) -> tuple[int, int, int] | None:
        """(first byte, last byte, status) a Range header asks for; None once a 416 is sent."""
        start, end = 0, size - 1
        if not rng:
            return start, end, 200
        m = _RANGE_RE.match(rng.strip())
        if not m or (m.group(1) == "" and m.group(2) == ""):
            self._error(416, None, f"Bad range {rng}")
            return None
        if m.group(1) == "":
            start = max(0, size - int(m.group(2)))
        else:
            start = int(m.group(1))
            if m.group(2):
                end = min(int(m.group(2)), size - 1)
        if start >= size or start > end:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return start, end, 206

    def _resolve(self, repo_id: str, rev: str, rel: str) -> None:  # noqa: C901, PLR0911, PLR0912
        found = self._repo(repo_id, rev)
        if found is None:
            return None
        repo_dir, tree, files, sha = found
        if self._auth_error(repo_dir):
            return None
        entry = files.get(rel)
        if entry is None:
            return self._error(404, "EntryNotFound", f"{rel} does not exist on {rev}")
        key = f"{repo_id}/{rel}"
        if self.command == "GET":
            status = self.faults.file_failure(key, rel)
            if status:
                return self._error(status, None, f"Injected failure for {rel}")
            limited = self.faults.rate_limited(key, rel)
            if limited is not None:
                return self._error(429, None, f"Injected rate limit for {rel}", limited)
        size = entry["size"]
        headers = {
            "X-Repo-Commit": sha,
            "ETag": f'"{entry["etag"]}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
            "Content-Disposition": f'attachment; filename="{rel.rsplit("/", 1)[-1]}"',
        }
        if "lfs" in entry:
            headers["X-Linked-Etag"] = f'"{entry["etag"]}"'
            headers["X-Linked-Size"] = str(size)
        rng = self.headers.get("Range")
        ignore = bool(rng) and self.command == "GET" and self.faults.range_ignored(key, rel)
        span = self._span(size, None if ignore else rng)
        if span is None:
            return None
        start, end, status = span
        extra, announce = (0, True)
        if self.command == "GET":
            extra, announce = self.faults.extra_length(key, rel)
        if status == 206 and announce:  # noqa: PLR2004
            headers["Content-Range"] = f"bytes {start}-{end + extra}/{size + extra}"
        elif status == 206:  # noqa: PLR2004
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = (end - start + 1 if size else 0) + extra
        if self.command == "GET":
            # Counted before the status line: a client that refuses the headers and asks
            # /_stats at once finds its request counted (counted after them, the
            # extra-bytes tests read the stats first: 1 run in ~25 on 2 busy cores).
            self.faults.count_request(key, rng)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if announce:
            self.send_header("Content-Length", str(length))
        else:  # the body ends where the connection does (RFC 9112, 6.3)
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command == "HEAD":
            return None
        self._stream(tree / rel, key, rel, start, length)
        return None

    def _stream(self, fpath: Path, key: str, rel: str, start: int, length: int) -> None:
        drop_at = self.faults.drop_limit(key, rel)
        hold = self.faults.hold_limit(key, rel)
        sent = 0
        t0 = time.monotonic()
        ledger = self.faults.ledger()
        with fpath.open("rb") as f:
            f.seek(start)
            while sent < length:
                n = min(CHUNK, length - sent)
                if hold is not None:
                    hold_at, drop_after_hold, go_on = hold
                    n = min(n, hold_at - sent)
                    if n <= 0:
                        self.wfile.flush()
                        self.faults.hold(key, go_on)
                        hold = None
                        if drop_after_hold:
                            drop_at = sent
                        continue
                if drop_at is not None:
                    n = min(n, drop_at - sent)
                    if n <= 0:
                        self.wfile.flush()
                        with contextlib.suppress(OSError):
                            self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                        return
                # Past the end of the file only with extra_bytes: a fixed filler byte.
                chunk = f.read(n) or b"\xa5" * n
                # Counted before the write: a client that has read these bytes
                # and then asks /_stats finds them counted (counted after, a
                # test could read the stats first: 1 run in ~20 on 2 busy
                # cores). A write the client did not take is taken back.
                self.faults.add_bytes(key, len(chunk), ledger)
                try:
                    self.wfile.write(chunk)
                except OSError:
                    self.faults.add_bytes(key, -len(chunk), ledger)
                    raise
                sent += len(chunk)
                bps = self.faults.throttle_bps
                if bps:
                    ahead = sent / bps - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)


def make_server(root, host: str = "127.0.0.1", port: int = 0, faults: Faults | None = None):
    """Build (not start) a server; ``server.faults`` and ``server.server_address`` are public."""
    if host not in LOOPBACK and host not in bridge_addresses():
        raise ValueError(
            f"refusing to bind {host}: this lab server binds loopback or a Docker bridge's "
            "address only"
        )
    index = RepoIndex(Path(root))
    faults = faults or Faults()
    handler = type("BoundHubHandler", (HubHandler,), {"index": index, "faults": faults})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    server.faults = faults
    server.index = index
    return server


def start_in_thread(root, host: str = "127.0.0.1", port: int = 0):
    """Start a server on a daemon thread; returns (server, base_url). Call server.shutdown()."""
    server = make_server(root, host, port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    h, p = server.server_address[:2]
    return server, f"http://{h}:{p}"


def _parse_rule(spec: str, keys: tuple[str, ...], defaults: tuple[int, ...]) -> tuple[str, dict]:
    pattern, *nums = spec.split(":")
    values = [int(x) for x in nums] + list(defaults[len(nums) :])
    return pattern, dict(zip(keys, values, strict=False))


def build_faults(args) -> dict:
    cfg = json.loads(os.environ.get("HUB_SERVER_FAULTS", "{}") or "{}")
    if args.throttle:
        cfg["throttle_bps"] = args.throttle
    if args.fail_file:
        rules = [_parse_rule(s, ("count", "status"), (-1, 503)) for s in args.fail_file]
        cfg["fail_file"] = dict(rules)
    if args.drop_after:
        rules = [_parse_rule(s, ("bytes", "count"), (0, 1)) for s in args.drop_after]
        cfg["drop_after"] = dict(rules)
    if args.fail_revision is not None:
        cfg["fail_revision"] = {"count": args.fail_revision, "status": 500}
    if args.fail_tree is not None:
        cfg["fail_tree"] = {"count": args.fail_tree, "status": 500}
    return cfg


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    p.add_argument("--root", required=True, help="directory holding <org>/<name>/ repos")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind: loopback, or the lab network's gateway (a Docker bridge)")
    p.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    p.add_argument("--pidfile", help="write the server's pid here")
    p.add_argument("--throttle", type=int, default=0, help="body bytes/s per response")
    p.add_argument(
        "--fail-file", action="append", metavar="GLOB[:COUNT[:STATUS]]", help="5xx on a file"
    )
    p.add_argument("--fail-revision", type=int, metavar="COUNT", help="500 on the revision API")
    p.add_argument("--fail-tree", type=int, metavar="COUNT", help="500 on tree/paths-info")
    p.add_argument(
        "--drop-after", action="append", metavar="GLOB:BYTES[:COUNT]", help="drop mid-body"
    )
    args = p.parse_args(argv)
    if argv is None:
        # A long-lived daemon: let go of every descriptor it inherited beyond stdio, so a
        # lock its starter held (`flock ... make molecule`) is not held for its lifetime.
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    server = make_server(args.root, args.host, args.port)
    server.faults.update(build_faults(args))
    if args.pidfile:
        Path(args.pidfile).write_text(f"{os.getpid()}\n")
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    host, port = server.server_address[:2]
    print(f"serving {Path(args.root).resolve()} on http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if args.pidfile:
            with contextlib.suppress(OSError):
                Path(args.pidfile).unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
