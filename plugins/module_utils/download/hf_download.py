# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Resumable, verified download of a Hugging Face model repo into a local directory.

huggingface_hub does what it does well: revision resolution (model_info), file
metadata (list_repo_tree: sizes, sha256 for LFS files, git blob ids), URLs
(hf_hub_url), auth headers (build_hf_headers), the HTTP client (get_session)
and error mapping (hf_raise_for_status). This module owns only the byte
transfer and the retry policy:

- every file is fetched with HTTP Range into a stable partial name,
  ``<local_dir>/.cache/vllm-fleet/partial/<path>.<hash16>.partial``, so a run
  killed half way resumes inside the file on the next run;
- 5xx answers and connection errors are retried with exponential backoff;
  a dropped connection that made progress resumes at once;
- a 429 that says when the Hub's rate-limit window resets (the IETF
  ``RateLimit: "api";r=0;t=55`` header the Hub sends, read by huggingface_hub's
  ``parse_ratelimit_headers``, else ``Retry-After`` in seconds or as an HTTP
  date) is waited out, reset + 1 s as huggingface_hub's own ``http_backoff``
  does (utils/_http.py), without spending a retry, while the time waited for
  rate limits (wall clock, overlapping waits of parallel files counted once)
  stays within ``rate_limit_wait_max``; a reset beyond it fails at once, before
  another request, naming the header and the bound, partials kept. A 429
  without a reset is backed off like a 5xx. (The Hub's quotas are counted over
  5-minute fixed windows, huggingface/hub-docs docs/hub/rate-limits.md, so one
  reset is at most 300 s.) huggingface_hub's paginated listing
  (``list_repo_tree``) retries its own 429s in ``http_backoff``, outside this
  bound;
- each file is hashed while it streams (the resumed prefix is read once from
  disk), sha256 for LFS files and the git blob id for the others, and only a
  verified file is renamed into place; a mismatch is deleted and fetched once
  more, then the run fails naming the file;
- files already on disk are hashed in parallel (a thread pool; hashlib
  releases the GIL) and recorded in ``.vllm-fleet-manifest.json`` with their
  size and mtime, so a later run trusts them without re-hashing unless
  ``reverify`` is set;
- one lock per model directory (fcntl.flock): a second run waits for the
  first and then finds the files verified; on a volume shared by hosts
  (``shared_volume``) or one without flock, a lease file as well, which holds
  across hosts (module_utils/download/models_volume.py);
- orphaned partial files are counted in the disk plan and removed before the
  fetch: huggingface_hub's ``*.incomplete`` files, our partials no file of this
  revision resumes, and the partials of other revisions unless
  ``keep_revisions`` names them (another catalog entry pins them);
- with ``snapshots=True`` each commit gets its own folder,
  ``<local_dir>/snapshots/<commit sha>/`` (the Hub cache's idea), so the files
  of two revisions never mix: a file the new commit shares with a verified
  older one (same hash and size, from another snapshot's manifest or from the
  flat layout of earlier versions) is hard-linked instead of fetched again;
  where the volume has no hard links it is copied (and verified), and the
  disk plan counts the copy.

Runs on the target under a virtualenv interpreter that has huggingface_hub;
the import is lazy so the module can fail with a clear message without it.
"""

from __future__ import absolute_import, division, print_function

import concurrent.futures
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import site
import stat
import sys
import tempfile
import threading
import time

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import durable
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import (
    disk_space,
    models_volume,
)
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download.hub_calls import (
    RATE_LIMIT_MARGIN_S,
    DownloadError,
    HubMissingError,
    HubRetry,
    RetryableError,
    _first_line,
    _is_transient,
    _status_of,
)

MANIFEST_NAME = ".vllm-fleet-manifest.json"
STATE_DIR = os.path.join(".cache", "vllm-fleet")
PARTIAL_DIR = os.path.join(STATE_DIR, "partial")
LOCK_NAME = os.path.join(STATE_DIR, "lock")
LEASE_NAME = os.path.join(STATE_DIR, models_volume.LEASE_NAME)
VOLUME_STATE = os.path.join(STATE_DIR, "volume.json")
CHUNK = 1024 * 1024
MANIFEST_VERSION = 1
SNAPSHOTS_DIR = "snapshots"
# A manifest lists every file of a revision (~200 bytes each): 16 MiB is ~80k files.
MANIFEST_LIMIT = 16 * 1024 * 1024
_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
_CONTENT_RANGE_RE = re.compile(r"^bytes\s+(\d+)-(\d+)/(\d+)$")


def unsafe_repo_path(path):
    """Why a path the Hub listed cannot be a file of the model folder; None when it can.

    The listing's paths are joined to the model folder and written as root: a
    mirror, a proxy or a hostile Hub that lists ``../x`` or ``/etc/x`` must not
    reach outside it (the sha256 comes from the same listing, so a hash check
    does not help). Relative, ``/``-separated, no empty, ``.`` or ``..``
    segment, no NUL or backslash, and inside the folder after normalisation.
    """
    if not isinstance(path, str) or not path:
        return "an empty path"
    bad = [part for part in path.split("/") if part in ("", ".", "..")]
    normal = os.path.normpath(path)
    for found, why in (("\x00" in path, "a NUL byte"), ("\\" in path, "a backslash"),
                       (path.startswith("/"), "an absolute path"),
                       (bool(bad), "a %r segment" % (bad or [""])[0]),
                       (normal != path, "a path that normalises to %r" % normal)):
        if found:
            return why
    return None


class RemoteFile(object):
    """One file of the repo at the resolved revision, as the Hub describes it."""

    __slots__ = ("blob_id", "path", "sha256", "size")

    def __init__(self, path, size, blob_id, sha256=None):
        self.path = path
        self.size = int(size)
        self.blob_id = blob_id
        self.sha256 = sha256

    @property
    def algorithm(self):
        return "sha256" if self.sha256 else "git-sha1"

    @property
    def expected(self):
        return (self.sha256 or self.blob_id or "").lower()

    def as_dict(self):
        return {"size": self.size, "algorithm": self.algorithm, "hash": self.expected}


# ---------------------------------------------------------------------------
# hashing


def new_hasher(algorithm, size):
    if algorithm == "sha256":
        return hashlib.sha256()
    h = hashlib.sha1()  # noqa: S324 - git blob ids are sha1 by definition
    h.update(("blob %d\0" % size).encode())
    return h


def hash_file(path, algorithm, size, buf_size=CHUNK, activity=None):
    """Hash a whole file in one pass; the size is the git header's length. `activity` (a
    one-item list) is bumped per chunk: the lease's heartbeat sees the work move."""
    h = new_hasher(algorithm, size)
    buf = bytearray(buf_size)
    view = memoryview(buf)
    with open(path, "rb") as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(view[:n])
            if activity is not None:
                activity[0] += 1
    return h.hexdigest()


def verify_files(pairs, workers, activity=None):
    """Hash [(RemoteFile, local path)] in parallel; return {path: actual hex digest}."""
    out = {}
    if not pairs:
        return out
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {
            pool.submit(hash_file, local, rf.algorithm, rf.size, activity=activity): rf.path
            for rf, local in pairs
        }
        for fut in concurrent.futures.as_completed(futures):
            out[futures[fut]] = fut.result()
    return out


# ---------------------------------------------------------------------------
# local state: manifest, partials, orphans, lock


def manifest_path(local_dir):
    return os.path.join(local_dir, MANIFEST_NAME)


def load_manifest(local_dir):
    """The folder's manifest; {} (every file hashed again) when it is absent, not JSON, not
    a regular file (a link, a FIFO: never followed nor waited on) or over MANIFEST_LIMIT."""
    try:
        data = json.loads(models_volume.read_state(manifest_path(local_dir), MANIFEST_LIMIT))
    except (OSError, ValueError, models_volume.VolumeError):
        return {}
    if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
        return {}
    return data


def write_json_atomic(path, data):
    durable.write_json_atomic(path, data, prefix=".vllm-fleet-state.", indent=1, sort_keys=True)


def partial_path(local_dir, rf):
    """Stable per (path, content) name: a changed upstream file never resumes a stale partial."""
    return os.path.join(local_dir, PARTIAL_DIR, "%s.%s.partial" % (rf.path, rf.expected[:16]))


def unchanged_since(entry, local):
    """Whether `local` still has the size and mtime a manifest entry recorded for it."""
    try:
        st = os.stat(local)
    except OSError:
        return False
    return st.st_size == entry.get("size") and st.st_mtime_ns == entry.get("mtime_ns")


def trusted_by_manifest(manifest, revision, rf, local):
    """A file the manifest verified earlier at this revision and that has not changed since."""
    entry = (manifest.get("files") or {}).get(rf.path)
    if not entry or manifest.get("revision") != revision:
        return False
    if entry.get("hash") != rf.expected or entry.get("size") != rf.size:
        return False
    return unchanged_since(entry, local)


def find_orphans(local_dir, hf_cache_repo_dir, wanted_partials, base_dir=None, keep_revisions=()):
    """Partial files nothing will resume: huggingface_hub's *.incomplete files (its own
    local-dir and cache layouts) and our partials that no file of this revision resumes.

    With `base_dir` (the snapshots layout) every folder of the repo is looked at: the flat
    folder of earlier versions and each commit's snapshot, whose partials are orphans unless
    its commit is in `keep_revisions` (another catalog entry pins it: its download resumes
    them).

    Nothing is followed: a snapshot, a folder on the way to a partial or a folder inside
    one that is a symbolic link is skipped (its target may be anyone's files), and only
    regular files and links themselves are listed (`remove_orphans` unlinks the names)."""
    folders = [local_dir]
    if base_dir and os.path.abspath(base_dir) != os.path.abspath(local_dir):
        folders.append(base_dir)
        snaps = os.path.join(base_dir, SNAPSHOTS_DIR)
        with contextlib.suppress(OSError):
            folders.extend(
                os.path.join(snaps, d) for d in sorted(os.listdir(snaps))
                if d not in set(keep_revisions or ())
                and os.path.abspath(os.path.join(snaps, d)) != os.path.abspath(local_dir)
            )
    found = []
    roots = [(folder, os.path.join(".cache", "huggingface")) for folder in folders]
    if hf_cache_repo_dir:
        roots.append((hf_cache_repo_dir, "blobs"))
    for top, below in roots:
        found.extend(p for p in _files_under(top, below) if p.endswith(".incomplete"))
    for folder in folders:
        found.extend(p for p in _files_under(folder, PARTIAL_DIR) if p not in wanted_partials)
    return sorted(set(found))


def _real_dir(path):
    """Whether `path` is a folder itself (lstat), not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _files_under(top, below):
    """Regular files and links (never their targets) under `top`/`below`, reached through
    real folders only: `top` and every folder from it down must not be a link."""
    path = top
    for part in ["", *below.split(os.sep)]:
        path = os.path.join(path, part) if part else path
        if not _real_dir(path):
            return []
    out = []
    for dirpath, dirs, files in os.walk(path):  # followlinks=False: linked dirs not entered
        dirs[:] = [d for d in dirs if _real_dir(os.path.join(dirpath, d))]
        for name in files:
            full = os.path.join(dirpath, name)
            with contextlib.suppress(OSError):
                mode = os.lstat(full).st_mode
                if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
                    out.append(full)
    return out


def remove_orphans(paths):
    """Unlink each orphan that still is a regular file or a link (the link itself, never
    its target), in a folder that is not a link; returns the paths removed."""
    removed = []
    for path in paths:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            continue
        if not _real_dir(os.path.dirname(path)):
            continue
        with contextlib.suppress(OSError):
            os.unlink(path)
            removed.append(path)
    return removed


def lsize(path):
    """Bytes of the name itself (a link counts its own few bytes, not its target's)."""
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def snapshot_dir(base_dir, sha):
    """The folder of one commit's files under a repo's base folder."""
    return os.path.join(base_dir, SNAPSHOTS_DIR, sha)


def verified_copies(base_dir, exclude_dir):
    """{(hash, size): path} of files another manifest under `base_dir` verified and that have
    not changed since: the flat layout's manifest (earlier versions) and each snapshot's."""
    dirs = [base_dir]
    snaps = os.path.join(base_dir, SNAPSHOTS_DIR)
    with contextlib.suppress(OSError):
        dirs.extend(os.path.join(snaps, d) for d in sorted(os.listdir(snaps)))
    found = {}
    for folder in dirs:
        if os.path.abspath(folder) == os.path.abspath(exclude_dir):
            continue
        manifest = load_manifest(folder)
        for path, entry in sorted((manifest.get("files") or {}).items()):
            local = os.path.join(folder, path)
            if unchanged_since(entry, local):
                found.setdefault((entry.get("hash"), entry.get("size")), local)
    return found


def bytes_under(folder):
    """Bytes of the regular files under `folder` (0 when it does not exist)."""
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and not os.path.islink(path):
                total += file_size(path)
    return total


def file_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def check_state_dir(folder):
    """The state folders under `folder` (.cache, .cache/vllm-fleet, its partial/) are
    folders, not links: a link there would send the lock, partials and records elsewhere."""
    found = models_volume.not_a_folder(folder, PARTIAL_DIR)
    if found:
        raise DownloadError("%s, not a folder: nothing on the volume is followed; "
                            "remove it (someone else put it there)" % found)


def open_partial(part, append):
    """A partial for writing: O_NOFOLLOW, a regular file of one link (a planted link, FIFO
    or hard link is refused, never written through), truncated only once checked."""
    folder = part.split(os.sep + PARTIAL_DIR + os.sep)[0]
    check_state_dir(folder)
    # and every folder below partial/ (a file of the repo's sub/dir keeps its folders)
    below = os.path.relpath(os.path.dirname(part), os.path.join(folder, PARTIAL_DIR))
    path = os.path.join(folder, PARTIAL_DIR)
    for name in [] if below == os.curdir else below.split(os.sep):
        path = os.path.join(path, name)
        if not _real_dir(path):
            raise DownloadError("%s is a symbolic link or not a folder: nothing on the volume "
                                "is followed; remove it (someone else put it there)" % path)
    try:
        fd = models_volume.open_nofollow(part, os.O_WRONLY | os.O_CREAT)
    except models_volume.VolumeError as e:
        raise DownloadError("a partial file: %s" % e) from e
    if append:
        os.lseek(fd, 0, os.SEEK_END)
    else:
        os.ftruncate(fd, 0)
    return os.fdopen(fd, "wb")


@contextlib.contextmanager
def model_lock(local_dir, wait=True, flock=fcntl.flock):
    """Exclusive flock on <local_dir>/.cache/vllm-fleet/lock; yields seconds waited."""
    path = os.path.join(local_dir, LOCK_NAME)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    check_state_dir(local_dir)
    try:
        fd = models_volume.open_nofollow(path, os.O_RDWR | os.O_CREAT)
    except models_volume.VolumeError as e:
        raise DownloadError("the download's lock: %s" % e) from e
    t0 = time.monotonic()
    try:
        try:
            flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES) or not wait:
                raise
            flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.write(fd, ("%d\n" % os.getpid()).encode())
        yield time.monotonic() - t0
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------
# progress


class Progress(object):
    """Thread-safe byte counters, written as JSON to a file every `interval` seconds."""

    def __init__(self, path, interval, *, repo_id, revision, total, done, files_total):
        self.path = path
        self.interval = interval
        self.lock = threading.Lock()
        self.base = {"repo_id": repo_id, "revision": revision, "pid": os.getpid()}
        self.total = total
        self.done = done
        self.start_done = done
        self.files_total = files_total
        self.files_done = 0
        self.retries = {}
        self.rate_limited = {}  # {file (None: the API): the wait for the Hub's reset going on}
        self.rate_limit_waited = 0.0
        self.t0 = time.monotonic()
        self.state = "downloading"
        self._stop = threading.Event()
        self._thread = None

    def add(self, n):
        with self.lock:
            self.done += n

    def note_retry(self, path):
        with self.lock:
            self.retries[path] = self.retries.get(path, 0) + 1

    def note_rate_limit(self, path, seconds, reset, waited):
        """A file (or the API) waits `seconds` for the Hub's rate-limit reset; written at once."""
        with self.lock:
            self.rate_limited[path] = {
                "file": path,
                "wait_seconds": round(seconds, 1),
                "until": time.monotonic() + seconds,
                "header": reset.header,
            }
            self.rate_limit_waited = waited
        self.write()

    def rate_limit_over(self, path):
        with self.lock:
            self.rate_limited.pop(path, None)

    def file_done(self):
        with self.lock:
            self.files_done += 1

    def snapshot(self):
        with self.lock:
            elapsed = max(time.monotonic() - self.t0, 1e-6)
            rate = (self.done - self.start_done) / elapsed
            left = max(self.total - self.done, 0)
            snap = dict(self.base)
            snap.update(
                state=self.state,
                bytes_done=self.done,
                bytes_total=self.total,
                files_done=self.files_done,
                files_total=self.files_total,
                rate_bytes_per_s=int(rate),
                eta_seconds=int(left / rate) if rate > 0 else None,
                elapsed_seconds=round(elapsed, 1),
                retries=dict(self.retries),
                rate_limit_waited_seconds=round(self.rate_limit_waited, 1),
                updated=time.time(),
            )
            if self.rate_limited:  # the wait that ends last, when files wait in parallel
                waiting = dict(max(self.rate_limited.values(), key=lambda w: w["until"]))
                until = waiting.pop("until")
                waiting["left_seconds"] = max(round(until - time.monotonic()), 0)
                snap["rate_limited"] = waiting
            return snap

    def write(self):
        if not self.path:
            return
        with contextlib.suppress(OSError):
            write_json_atomic(self.path, self.snapshot())

    def _loop(self):
        while not self._stop.wait(self.interval):
            self.write()

    def start(self):
        self.write()
        if self.path:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()

    def stop(self, state):
        self.state = state
        self._stop.set()
        if self._thread:
            self._thread.join()
        self.write()


# ---------------------------------------------------------------------------
# huggingface_hub adapter


def venv_site_packages(venv):
    """site-packages of a virtualenv made by this same Python (lib/pythonX.Y/site-packages)."""
    if not venv:
        return None
    path = os.path.join(
        venv, "lib", "python%d.%d" % sys.version_info[:2], "site-packages"
    )
    return path if os.path.isdir(path) else None


def import_hub(hub_venv=None):
    """Import huggingface_hub lazily; raise HubMissingError with a clear message if absent.

    `hub_venv` is a virtualenv made by the Python running this module (the role's
    tools virtualenv): its site-packages joins the import path, so the module
    runs under the host's own interpreter either way.
    """
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
    site_packages = venv_site_packages(hub_venv)
    if site_packages and site_packages not in sys.path:
        site.addsitedir(site_packages)
    try:
        import huggingface_hub
        import huggingface_hub.errors
        import huggingface_hub.utils
    except ImportError as e:
        raise HubMissingError(
            "huggingface_hub is not importable by %s (%s)%s"
            % (
                sys.executable,
                e,
                "" if site_packages else "; no virtualenv of this Python at %s" % hub_venv
                if hub_venv else "",
            )
        ) from e
    return huggingface_hub


HTTP_UNAUTHORIZED = 401


def _server_message(exc):
    """The Hub's own reason (its X-Error-Message, huggingface_hub's server_message), one line."""
    said = getattr(exc, "server_message", None) or ""
    return " ".join(str(said).split())


def describe_hub_error(hub, exc, repo_id, revision, endpoint):  # noqa: PLR0911
    """One line that says which of 404 repo / unknown revision / gated / refused token /
    other it was."""
    errors = hub.errors
    where = endpoint or "the Hub"
    status = _status_of(exc)
    if isinstance(exc, errors.GatedRepoError):
        return (
            "repository %s is gated (HTTP %s at %s): it needs a token of an account that was "
            "granted access (token / token_file)" % (repo_id, status, where)
        )
    said = _server_message(exc)
    if status == HTTP_UNAUTHORIZED and said:
        # The Hub answers a revoked or mistyped token 401 "Invalid credentials in
        # Authorization header" on every route; huggingface_hub raises it as a plain
        # HTTP error (or "repository not found"): the Hub's own reason says which.
        return ("the Hub at %s refused the token for %s (HTTP 401: %s): check token / "
                "token_file" % (where, repo_id, said))
    if isinstance(exc, errors.RevisionNotFoundError):
        return "revision %r not found in repository %s at %s (HTTP %s)" % (
            revision,
            repo_id,
            where,
            status,
        )
    if isinstance(exc, errors.RepositoryNotFoundError):
        return (
            "repository %s not found at %s (HTTP %s): check repo_id, or the token if it is "
            "private" % (repo_id, where, status)
        )
    if isinstance(exc, getattr(errors, "RemoteEntryNotFoundError", ())):
        return "file not found in %s at revision %s (HTTP %s): %s" % (
            repo_id,
            revision,
            status,
            str(exc).splitlines()[-1],
        )
    first = _first_line(exc)
    at = " at %s" % endpoint if endpoint else ""
    if status is None:  # no HTTP answer at all: the network error is the news
        return "Hub request for %s@%s%s failed with no HTTP answer (network error): %s" % (
            repo_id,
            revision,
            at,
            first,
        )
    return "Hub request for %s@%s%s failed (HTTP %s): %s" % (
        repo_id,
        revision,
        at,
        status,
        first,
    )


# ---------------------------------------------------------------------------
# the downloader


# How the hf_download module's options reach HfDownloader: the one list of them (the module
# builds its downloader only through HfDownloader.from_module). Passed under the same name:
MODULE_OPTIONS = (
    "repo_id", "local_dir", "revision", "allow_patterns", "ignore_patterns", "endpoint",
    "hf_home", "reverify", "max_workers", "retries", "rate_limit_wait_max", "progress_file",
    "progress_interval", "margin_bytes", "hub_venv", "snapshots", "shared_volume", "lease_s",
    "lease_wait_s", "lease_stall_s", "keep_revisions",
)
# ... under another name:
MODULE_RENAMED = {"retry_backoff": "backoff", "size_hint_bytes": "size_hint"}
# ... read here, not passed on (read_token: the downloader gets the token itself):
MODULE_ONLY = ("token", "token_file")


class RangeFetch(object):
    """The transfer of one file of a download: a GET of the bytes its partial still lacks
    (HTTP Range), hashed as they stream, the server's sizes checked before a byte is
    written, a failure retried by `retry` (hub_calls.HubRetry) or said in one line.
    `hub` is huggingface_hub (its URLs, headers, errors); `local_dir` the model folder
    (for messages), `kept_in` where the partials stay; `cancel` ends it when another file
    failed. Where the file goes once it is verified is the downloader's (HfDownloader)."""

    def __init__(self, hub, repo_id, *, endpoint, token, timeout, local_dir, kept_in, cancel,
                 retry):
        self.hub = hub
        self.repo_id = repo_id
        self.endpoint = endpoint
        self.token = token
        self.timeout = timeout
        self.local_dir = local_dir
        self.kept_in = kept_in
        self.cancel = cancel
        self.retry = retry

    def url(self, sha, rf):
        kwargs = {"revision": sha}
        if self.endpoint:
            kwargs["endpoint"] = self.endpoint
        return self.hub.hf_hub_url(self.repo_id, rf.path, **kwargs)

    def headers(self):
        headers = self.hub.utils.build_hf_headers(token=self.token, library_name="vllm-fleet")
        headers["Accept-Encoding"] = "identity"
        return headers

    def _prime_hasher(self, part, rf):
        """Hash the resumed prefix once, so the whole file is hashed as it streams."""
        have = lsize(part)  # a link's own size: its target is never read (open_partial refuses it)
        if have > rf.size or (have and not stat.S_ISREG(os.lstat(part).st_mode)):
            os.remove(part)
            have = 0
        h = new_hasher(rf.algorithm, rf.size)
        if have:
            fd = models_volume.open_nofollow(part, os.O_RDONLY, one_link=False)
            with os.fdopen(fd, "rb") as f:
                remaining = have
                while remaining:
                    chunk = f.read(min(CHUNK, remaining))
                    if not chunk:
                        break
                    h.update(chunk)
                    remaining -= len(chunk)
        return h, have

    def _stream_once(self, session, url, headers, part, rf, progress, state):
        """One GET of the missing bytes into the partial; returns bytes written."""
        h, have = state["hasher"], state["have"]
        req_headers = dict(headers)
        if have:
            req_headers["Range"] = "bytes=%d-" % have
        written = 0
        with session.stream("GET", url, headers=req_headers, timeout=self.timeout) as resp:
            if resp.status_code == 416:  # noqa: PLR2004 - partial longer than the file
                raise RetryableError("range not satisfiable for %s" % rf.path)
            if resp.status_code >= 400:  # noqa: PLR2004
                resp.read()
                self.hub.utils.hf_raise_for_status(resp)
            mode = "ab"
            if have and resp.status_code != 206:  # noqa: PLR2004 - server ignored Range
                # A 200 carries the file from byte 0: appending it to the partial would
                # put the first `have` bytes twice. Start the partial again.
                h, have = new_hasher(rf.algorithm, rf.size), 0
                progress.add(-state["have"])
                mode = "wb"
            self.check_announced_size(resp, rf, have)
            state["hasher"], state["have"] = h, have
            with open_partial(part, append=mode == "ab") as out:
                for chunk in resp.iter_bytes(CHUNK):
                    if self.cancel.is_set():
                        raise DownloadError("cancelled")
                    if have + len(chunk) > rf.size:
                        out.close()
                        os.remove(part)
                        raise DownloadError(
                            "%s: the Hub lists %d bytes, the server sent at least %d (no "
                            "Content-Length); the partial was removed and nothing is kept"
                            % (rf.path, rf.size, have + len(chunk))
                        )
                    out.write(chunk)
                    h.update(chunk)
                    have += len(chunk)
                    written += len(chunk)
                    state["have"] = have
                    state["written"] += len(chunk)
                    progress.add(len(chunk))
                out.flush()
                os.fsync(out.fileno())
        if have < rf.size:
            raise RetryableError(
                "%s: connection ended at %d of %d bytes" % (rf.path, have, rf.size)
            )
        return written

    @staticmethod
    def check_announced_size(resp, rf, have):
        """Fail before writing a byte when the answer's headers give the file another size.

        `have` is where the body must start in the file: the partial's length for a 206, 0
        for a 200. The size the server gives is Content-Range's total (206) or Content-Length
        (200, when the body is not content-encoded); it must be the size the Hub lists. A 206
        may carry less than was asked (RFC 9110, 14.4), so only its total is compared.
        """
        found, how = None, None
        if resp.status_code == 206:  # noqa: PLR2004
            header = resp.headers.get("Content-Range", "").strip()
            content_range = _CONTENT_RANGE_RE.match(header)
            if content_range and int(content_range.group(1)) != have:
                raise DownloadError(
                    "%s: asked for the bytes from %d, the server sent a range from %s "
                    "(Content-Range %s); nothing of this answer was written"
                    % (rf.path, have, content_range.group(1), header)
                )
            if content_range and int(content_range.group(3)) != rf.size:
                found, how = int(content_range.group(3)), "Content-Range %s" % header
        else:
            length = resp.headers.get("Content-Length", "").strip()
            encoding = resp.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding in ("", "identity") and length.isdigit() and int(length) != rf.size:
                found, how = int(length), "Content-Length"
        if found is not None:
            raise DownloadError(
                "%s: the Hub lists %d bytes, the server sends %d (%s); nothing of this "
                "answer was written" % (rf.path, rf.size, found, how),
                size_listed=rf.size,
                size_found=found,
            )

    def fetch(self, session, sha, rf, progress, part):
        """Fetch rf into its partial `part` (resuming); returns (bytes written, actual hash,
        part). `progress` (the job's Progress) counts the bytes, the retries and the waits."""
        if self.cancel.is_set():
            raise DownloadError("cancelled")
        os.makedirs(os.path.dirname(part), exist_ok=True)
        url = self.url(sha, rf)
        headers = self.headers()
        h, have = self._prime_hasher(part, rf)
        progress.add(have)
        state = {"hasher": h, "have": have, "written": 0}
        attempt = 0
        while state["have"] < rf.size or (rf.size == 0 and not os.path.exists(part)):
            before = state["have"]
            try:
                self._stream_once(session, url, headers, part, rf, progress, state)
            except DownloadError:
                raise
            except Exception as e:
                if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise DownloadError(
                        "no space left on device writing %s under %s after %d of %d bytes; "
                        "partial files are kept in %s for the next run to resume"
                        % (rf.path, self.local_dir, state["have"], rf.size, self.kept_in),
                        enospc=True,
                    ) from e
                if isinstance(e, RetryableError) and "range not satisfiable" in str(e):
                    with contextlib.suppress(OSError):
                        os.remove(part)
                    progress.add(-state["have"])
                    state["hasher"], state["have"] = new_hasher(rf.algorithm, rf.size), 0
                hub_error = isinstance(e, self.hub.errors.HfHubHTTPError)
                if isinstance(e, OSError) and not hub_error and not _is_transient(self.hub, e):
                    raise DownloadError("%s: cannot write %s: %s" % (rf.path, part, e)) from e
                if not _is_transient(self.hub, e):
                    raise DownloadError(
                        describe_hub_error(self.hub, e, self.repo_id, sha, self.endpoint)
                        + " (file %s)" % rf.path
                    ) from e
                attempt = self._retry_or_fail(rf, e, attempt, before, state, progress)
        return state["written"], state["hasher"].hexdigest(), part

    def _retry_or_fail(self, rf, exc, attempt, before, state, progress):
        """Progress since the last try resets the count; otherwise back off or give up.

        A 429 with the Hub's reset is waited out instead, spending no retry.
        """
        if self.retry.wait_rate_limit(exc, rf.path, self.hub, progress):
            return attempt
        if state["have"] > before:
            return 0
        if attempt >= self.retry.retries:
            raise DownloadError(
                "%s: giving up after %d retries with backoff: %s"
                % (rf.path, self.retry.retries, _first_line(exc))
            ) from exc
        self.retry.spend(attempt, rf.path, progress)
        return attempt + 1


class HfDownloader(object):
    """One repo into one local_dir. Call run(); it returns the module's result dict."""

    @classmethod
    def from_module(cls, params, check_mode=False):
        """The downloader of the hf_download module's `params` (its argument_spec's names)."""
        kw = {name: params[name] for name in MODULE_OPTIONS}
        kw.update((to, params[name]) for name, to in MODULE_RENAMED.items())
        token = read_token(params["token"], params["token_file"])
        # backoff_max: the module's cap is 60 s (the class's 30 s is the tests' and bench's).
        return cls(token=token, backoff_max=60.0, check_mode=check_mode, **kw)

    def __init__(
        self,
        repo_id,
        local_dir,
        *,
        revision="main",
        allow_patterns=None,
        ignore_patterns=None,
        endpoint=None,
        token=None,
        hf_home=None,
        reverify=False,
        max_workers=4,
        retries=5,
        backoff=1.0,
        backoff_max=30.0,
        progress_file=None,
        progress_interval=10.0,
        margin_bytes=1024**3,
        check_mode=False,
        timeout=60.0,
        sleep=time.sleep,
        clock=time.monotonic,
        rate_limit_wait_max=600.0,
        hub_venv=None,
        size_hint=None,
        snapshots=False,
        shared_volume=False,
        lease_s=60.0,
        lease_wait_s=14400.0,
        lease_stall_s=900.0,
        keep_revisions=None,
        flock=fcntl.flock,
        link=os.link,
        mounts=None,
    ):
        self.repo_id = repo_id
        self.local_dir = os.path.abspath(local_dir)
        # With snapshots, local_dir is the repo's base folder and the files of a commit go to
        # base/snapshots/<sha> (set once the revision is resolved).
        self.base_dir = self.local_dir
        self.snapshots = snapshots
        # The volume: shared by hosts (a lease file too), keep_revisions' partials kept;
        # flock, link and mounts are the system's (tests replace them where the lab's one
        # kernel cannot show a host-local lock or a filesystem without links).
        self.shared_volume = bool(shared_volume)
        self.lease_s = float(lease_s)
        self.lease_wait_s = float(lease_wait_s)
        self.lease_stall_s = float(lease_stall_s)
        # Bumped for each MiB hashed or copied: with the progress's bytes, what tells the
        # lease's heartbeat that the work moves.
        self.activity = [0]
        self.keep_revisions = list(keep_revisions or [])
        self.flock = flock
        self.link = link
        self.mounts = mounts
        self.volume = None
        self.revision = revision or "main"
        self.allow_patterns = allow_patterns or None
        self.ignore_patterns = ignore_patterns or None
        self.endpoint = endpoint.rstrip("/") if endpoint else None
        self.token = token or None
        self.hf_home = hf_home
        self.reverify = reverify
        self.max_workers = max(1, int(max_workers or 1))
        self.retries = max(0, int(retries))
        self.progress_file = progress_file
        self.progress_interval = progress_interval
        self.margin_bytes = int(margin_bytes)
        self.check_mode = check_mode
        self.timeout = timeout
        self.sleep = sleep
        self.clock = clock
        self.rate_limit_wait_max = max(0.0, float(rate_limit_wait_max))
        self.hub_venv = hub_venv
        self.size_hint = None if size_hint is None else int(size_hint)
        self.hub = None
        self.progress = None
        self.cancel = threading.Event()
        # Whether and when a failed call to the Hub is tried again (hub_calls.py).
        self.retry = HubRetry(retries=self.retries, backoff=backoff, backoff_max=backoff_max,
                              rate_limit_wait_max=self.rate_limit_wait_max, sleep=sleep,
                              clock=clock, cancel=self.cancel,
                              budget_message=self._rate_limit_msg)

    @property
    def retries_used(self):
        return self.retry.retries_used

    @property
    def rate_limit_waited(self):
        return self.retry.rate_limit_waited

    def _rate_limit_msg(self, path, reset, total):
        where = "%s of %s" % (path, self.repo_id) if path else "the Hub API for %s" % self.repo_id
        kept = (
            "partial files are kept in %s for the next run to resume"
            % os.path.join(self.local_dir, PARTIAL_DIR)
            if path
            else "nothing on disk was changed (partial files stay for the next run to resume)"
        )
        return (
            "%s: the Hub rate-limited this download (HTTP 429, %s: the window resets in %d s); "
            "waiting for it (+%d s) would take the time waited for rate limits to %d s, beyond "
            "rate_limit_wait_max %d s (role variable model_download_rate_limit_wait_max_s): "
            "raise it, or run again after the reset%s; %s"
            % (
                where,
                reset.header,
                reset.seconds,
                RATE_LIMIT_MARGIN_S,
                round(total),
                round(self.rate_limit_wait_max),
                "" if self.token else
                " (no token was sent: anonymous requests get the lowest limits, per IP address)",
                kept,
            )
        )

    # -- metadata -------------------------------------------------------------
    def _api(self):
        return self.hub.HfApi(endpoint=self.endpoint, token=self.token)

    def resolve(self):
        """(commit sha, [RemoteFile]) for the revision, filtered by the patterns."""
        api = self._api()
        started = time.monotonic()
        try:
            info = self.retry.call(
                lambda: api.model_info(self.repo_id, revision=self.revision), self.hub)
            sha = info.sha or ""
            entries = []
            if _SHA_RE.match(sha):
                entries = self.retry.call(
                    lambda: list(api.list_repo_tree(self.repo_id, recursive=True, revision=sha)),
                    self.hub)
        except DownloadError:
            raise
        except Exception as e:
            if isinstance(e, self.hub.errors.HfHubHTTPError) or _is_transient(self.hub, e):
                raise DownloadError(
                    describe_hub_error(self.hub, e, self.repo_id, self.revision, self.endpoint)
                    + (
                        "; nothing on disk was trusted (%d retr%s, %.0f s)"
                        % (
                            self.retries_used,
                            "y" if self.retries_used == 1 else "ies",
                            time.monotonic() - started,
                        )
                        if _is_transient(self.hub, e)
                        else ""
                    )
                ) from e
            raise
        if not _SHA_RE.match(sha):
            raise DownloadError(
                "the Hub answered no commit sha for %s@%s" % (self.repo_id, self.revision)
            )
        files = {}
        for e in entries:
            why = unsafe_repo_path(getattr(e, "path", None))
            if why:
                raise DownloadError(
                    "the Hub's listing of %s@%s names %r, %s: a file there would be written "
                    "outside the model folder %s; the revision is refused, nothing was written"
                    % (self.repo_id, sha, getattr(e, "path", None), why, self.local_dir))
            if not hasattr(e, "blob_id"):
                continue  # a folder
            lfs = getattr(e, "lfs", None)
            sha256 = getattr(lfs, "sha256", None) if lfs is not None else None
            files[e.path] = RemoteFile(e.path, e.size, e.blob_id, sha256)
        kept = self.hub.utils.filter_repo_objects(
            sorted(files), allow_patterns=self.allow_patterns, ignore_patterns=self.ignore_patterns
        )
        remote = [files[p] for p in kept]
        if not remote:
            raise DownloadError(
                "no file of %s@%s matches allow_patterns=%s ignore_patterns=%s"
                % (self.repo_id, sha, self.allow_patterns, self.ignore_patterns)
            )
        return sha, remote

    def _hf_cache_repo_dir(self):
        home = self.hf_home or os.environ.get("HF_HOME")
        if not home:
            return None
        return os.path.join(home, "hub", "models--" + self.repo_id.replace("/", "--"))

    # -- the transfer -----------------------------------------------------------
    def _fetcher(self):
        """One file's transfer (RangeFetch), through the Hub this run imported."""
        return RangeFetch(self.hub, self.repo_id, endpoint=self.endpoint, token=self.token,
                          timeout=self.timeout, local_dir=self.local_dir,
                          kept_in=os.path.join(self.local_dir, PARTIAL_DIR), cancel=self.cancel,
                          retry=self.retry)

    def _fetch_verified(self, session, sha, rf, progress):
        """Fetch, verify, rename into place; one refetch on mismatch. Returns (bytes, refetched)."""
        dest = os.path.join(self.local_dir, rf.path)
        total_written = 0
        for attempt in range(2):
            part = partial_path(self.local_dir, rf)
            written, actual, part = self._fetcher().fetch(session, sha, rf, progress, part)
            total_written += written
            got = file_size(part)
            if actual == rf.expected and got == rf.size:
                self._dest_folder(rf)
                try:
                    os.replace(part, dest)
                except FileNotFoundError as e:
                    raise DownloadError(self._other_writer(rf, part, "was moved away")) from e
                progress.file_done()
                return total_written, attempt
            with contextlib.suppress(FileNotFoundError):
                os.remove(part)
            progress.add(-rf.size)
            if attempt == 1:
                if got != rf.size:
                    raise DownloadError(self._other_writer(
                        rf, part, "is %d bytes, the Hub lists %d (the %s of what this run "
                        "wrote is %s)" % (got, rf.size, rf.algorithm, actual)))
                raise DownloadError(
                    "%s failed verification twice: %s %s expected, got %s (size %d)"
                    % (rf.path, rf.algorithm, rf.expected, actual, rf.size)
                )
        return total_written, 1  # not reached

    # -- the run ------------------------------------------------------------------
    def run(self):
        t0 = time.monotonic()
        if self.hf_home:
            os.environ["HF_HOME"] = self.hf_home
        try:
            self.hub = import_hub(self.hub_venv)
        except HubMissingError as e:
            if self.check_mode and self.size_hint is not None:
                return self.estimate(t0, e.msg)
            raise
        self.volume = self.read_volume()
        if self.check_mode:  # read-only: no folder, no lock file
            return self._run_locked(t0, waited=0.0)
        try:
            os.makedirs(self.local_dir, exist_ok=True)
        except OSError as e:
            raise DownloadError("cannot create local_dir %s: %s" % (self.local_dir, e)) from e
        with self._locks() as waited:
            return self._run_locked(t0, waited)

    # -- the volume ---------------------------------------------------------------
    def read_volume(self):
        """What the models volume gives: its mount, flock (probed, read-only) and how far it
        holds, hard links (known from the filesystem or from an earlier run here)."""
        mounts = self.mounts if self.mounts is not None else models_volume.read_mounts()
        mount = models_volume.mount_for(disk_space.existing_parent(self.base_dir), mounts)
        flock_error = models_volume.probe_flock(self.base_dir, self.flock)
        scope, why = models_volume.lock_scope(mount)
        if flock_error:
            scope, why = "none", "flock on %s answers %s" % (
                mount["mount_point"] if mount else self.base_dir, flock_error)
        recorded = {}  # a record that is a link, a FIFO or too large is not read
        with contextlib.suppress(OSError, models_volume.VolumeError):
            recorded = models_volume.read_json_state(os.path.join(self.base_dir, VOLUME_STATE))
        links = recorded.get("hard_links")
        links_from = "tried here" if links is not None else "filesystem type"
        if links is None:
            links = models_volume.hard_links(mount)
        locks = (["flock"] if not flock_error else []) + (
            ["lease"] if self.shared_volume or flock_error else [])
        notes = []
        if flock_error:
            notes.append("no flock on this volume (%s): a lease file keeps stagers apart" % why)
        if self.shared_volume and scope == "this-host":
            notes.append("flock holds on this host only (%s): a lease file keeps the hosts "
                         "that share the volume apart" % why)
        if not self.shared_volume and scope in ("hosts", "this-host", "unknown") and mount:
            notes.append("%s is a network filesystem (%s): if other hosts stage to it, name "
                         "the volume in vllm_fleet_models_volume" % (
                             mount["mount_point"], mount["fstype"]))
        return {
            "mount_point": mount["mount_point"] if mount else None,
            "fstype": mount["fstype"] if mount else None,
            "shared": self.shared_volume,
            "flock": flock_error or "ok",
            "lock_scope": scope,
            "lock_scope_why": why,
            "locks": locks,
            "hard_links": links,
            "hard_links_from": links_from,
            "notes": notes,
        }

    @contextlib.contextmanager
    def _locks(self):
        """flock where the volume has it, and the lease file where hosts share it or flock
        is missing; yields the seconds waited for both."""
        waited = 0.0
        with contextlib.ExitStack() as stack:
            if "flock" in self.volume["locks"]:
                try:
                    waited += stack.enter_context(model_lock(self.local_dir, flock=self.flock))
                except OSError as e:
                    raise DownloadError("cannot lock %s: %s" % (
                        os.path.join(self.local_dir, LOCK_NAME), e)) from e
            if "lease" in self.volume["locks"]:
                os.makedirs(os.path.join(self.base_dir, STATE_DIR), exist_ok=True)
                lease = models_volume.LeaseLock(
                    os.path.join(self.base_dir, LEASE_NAME), lease_s=self.lease_s,
                    sleep=self.sleep, on_wait=self._note_lease_wait,
                    wait_s=self.lease_wait_s, progress=self._work_mark,
                    stall_s=self.lease_stall_s)
                try:
                    waited += lease.acquire()
                except models_volume.VolumeError as e:
                    raise DownloadError(str(e)) from e
                stack.callback(lease.release)
                self.volume["lease_broken"] = lease.broke
            yield waited
            if "lease" in self.volume["locks"]:
                self.volume["lease_lost"] = lease.lost

    def _work_mark(self):
        """What changes while this run's work moves: bytes fetched and MiB hashed/copied."""
        done = self.progress.snapshot().get("bytes_done") if self.progress is not None else None
        return (done, self.activity[0])

    def _note_lease_wait(self, holder, waited):
        """While another host stages this repo: say who, in the progress file."""
        if not self.progress_file:
            return
        with contextlib.suppress(OSError):
            write_json_atomic(self.progress_file, {
                "repo_id": self.repo_id, "pid": os.getpid(), "state": "waiting",
                "waiting_for": {k: holder.get(k) for k in ("host", "pid", "since")},
                "waited_s": round(waited, 1), "lease_s": self.lease_s,
                "bytes_done": 0, "bytes_total": 0,
                "updated": time.time(),
            })

    def _try_link(self, folder):
        """(ok, why): a hard link tried in `folder` between a probe file and a second name,
        both removed after."""
        # An unpredictable name made with O_EXCL (never one another user placed first).
        src = os.path.join(folder, "link-probe.%s" % secrets.token_hex(8))
        dst = src + ".link"
        try:
            fd = os.open(src, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write("probe\n")
            self.link(src, dst)
        except OSError as e:
            return False, "[Errno %d] %s" % (e.errno, e.strerror)
        finally:
            for p in (src, dst):
                with contextlib.suppress(OSError):
                    os.remove(p)
        return True, None

    def _note_links(self, ok, why):
        self.volume.update(hard_links=ok, hard_links_from="tried here")
        if why:
            self.volume["hard_links_error"] = why

    def _links_work(self):
        """Try a hard link once on this volume (a file in the state folder); record it."""
        state = os.path.join(self.base_dir, STATE_DIR)
        os.makedirs(state, exist_ok=True)
        ok, why = self._try_link(state)
        self._note_links(ok, why)
        with contextlib.suppress(OSError):
            write_json_atomic(os.path.join(self.base_dir, VOLUME_STATE),
                              {"hard_links": ok, "error": why, "fstype": self.volume["fstype"],
                               "tried_at": time.time()})
        return ok

    def _probe_links(self):
        """Check mode: the same try as a real run, in a temp folder of the models folder made
        and removed here (the state folder where it exists); nothing is recorded. A folder
        that cannot be made leaves the answer to the filesystem type, and says so."""
        state = os.path.join(self.base_dir, STATE_DIR)
        where = state if os.path.isdir(state) else self.base_dir
        try:
            with tempfile.TemporaryDirectory(prefix=".link-probe.", dir=where) as tmp:
                ok, why = self._try_link(tmp)
        except OSError as e:
            self.volume["notes"].append(
                "check mode could not try a hard link in %s ([Errno %d] %s): whether files "
                "are linked or copied is known from the filesystem type only"
                % (where, e.errno, e.strerror))
            return self.volume["hard_links"]
        self._note_links(ok, why)
        return ok

    def _need_split(self, bytes_to_download, copy_bytes):
        """What the need is made of, for a refusal: downloads, and copies where no links."""
        return "of the need, %d bytes to download%s" % (
            bytes_to_download, " and %d to copy (no hard links on %s)"
            % (copy_bytes, self.volume["fstype"]) if copy_bytes else "")

    def estimate(self, t0, why):
        """Check mode without huggingface_hub: the size hint less what is on disk.

        A host before its first download has no tools virtualenv; the plan
        still says whether the volume can hold the model, from the catalog's
        size instead of the Hub's file list, and says so.
        """
        # One folder per commit: the commit is not known yet, so nothing on disk counts.
        on_disk = 0 if self.snapshots else bytes_under(self.local_dir)
        need = max(self.size_hint - on_disk, 0)
        return {
            "estimated": True,
            "estimate_reason": why,
            "revision": None,
            "revision_requested": self.revision,
            "files": None,
            "bytes_total": self.size_hint,
            "bytes_to_download": need,
            "bytes_on_disk": on_disk,
            "files_to_fetch": [],
            "files_to_reuse": [],
            "files_mismatched": [],
            "orphans_removed": [],
            "model_dir": None,
            "disk": disk_space.check(self.local_dir, need, self.margin_bytes),
            "changed": True,
            "bytes_downloaded": 0,
            "seconds": round(time.monotonic() - t0, 3),
        }

    def _classify_local(self, sha, remote, manifest):
        """Split remote files into trusted / to hash / to fetch (no network)."""
        trusted, to_hash, to_fetch = [], [], []
        for rf in remote:
            local = os.path.join(self.local_dir, rf.path)
            if not self.reverify and trusted_by_manifest(manifest, sha, rf, local):
                trusted.append(rf)
            elif file_size(local) == rf.size and os.path.isfile(local):
                to_hash.append(rf)
            else:
                to_fetch.append(rf)
        return trusted, to_hash, to_fetch

    def _run_locked(self, t0, waited):  # noqa: C901, PLR0915
        sha, remote = self.resolve()
        self._enter_snapshot(sha)
        manifest = load_manifest(self.local_dir)
        trusted, to_hash, to_fetch = self._classify_local(sha, remote, manifest)
        wanted_partials = {partial_path(self.local_dir, rf) for rf in remote}
        orphans = find_orphans(
            self.local_dir, self._hf_cache_repo_dir(), wanted_partials,
            base_dir=self.base_dir if self.snapshots else None,
            keep_revisions=self.keep_revisions)
        orphan_bytes = sum(lsize(p) for p in orphans)
        bytes_total = sum(rf.size for rf in remote)

        # Hash what is on disk but not vouched for by the manifest (parallel, one read).
        actual = verify_files(
            [(rf, os.path.join(self.local_dir, rf.path)) for rf in to_hash], self.max_workers,
            activity=self.activity,
        )
        mismatched = [rf for rf in to_hash if actual[rf.path] != rf.expected]
        verified = trusted + [rf for rf in to_hash if actual[rf.path] == rf.expected]
        to_fetch = to_fetch + mismatched
        # Files another verified revision already holds are hard-linked, not fetched.
        # (Only when something is missing: a re-run with every file in place reads no other
        # revision's manifest.)
        copies = (verified_copies(self.base_dir, self.local_dir)
                  if self.snapshots and to_fetch else {})
        reuse = [(rf, copies[(rf.expected, rf.size)]) for rf in to_fetch
                 if (rf.expected, rf.size) in copies]
        to_fetch = [rf for rf in to_fetch if (rf.expected, rf.size) not in copies]
        partial_bytes = sum(
            min(file_size(partial_path(self.local_dir, rf)), rf.size) for rf in to_fetch
        )
        bytes_to_download = sum(rf.size for rf in to_fetch) - partial_bytes
        copy_bytes = self._copy_bytes(reuse)
        disk = self._disk(bytes_to_download + copy_bytes, orphan_bytes)
        if copy_bytes and not disk["ok"]:
            disk["msg"] += "; " + self._need_split(bytes_to_download, copy_bytes)
        result = {
            "estimated": False,
            "revision": sha,
            "revision_requested": self.revision,
            "files": len(remote),
            "bytes_total": bytes_total,
            "bytes_to_download": bytes_to_download,
            "bytes_partial": partial_bytes,
            "bytes_verified_before": sum(rf.size for rf in verified),
            "files_to_fetch": sorted(rf.path for rf in to_fetch),
            "files_to_reuse": sorted(rf.path for rf, _src in reuse),
            "bytes_reused": sum(rf.size for rf, _src in reuse),
            "bytes_to_copy": copy_bytes,
            "bytes_orphaned": orphan_bytes,
            "volume": self.volume,
            "files_mismatched": sorted(rf.path for rf in mismatched),
            "orphans_removed": orphans,
            "model_dir": self.local_dir,
            "manifest": manifest_path(self.local_dir),
            "disk": disk,
            "lock_waited_seconds": round(waited, 3),
        }
        changed = bool(to_fetch or orphans or reuse)
        result["diff"] = {
            "before": {
                "revision": manifest.get("revision"),
                "files_to_fetch": result["files_to_fetch"],
            },
            "after": {"revision": sha, "files_to_fetch": []},
        }
        if self.check_mode:
            seconds = round(time.monotonic() - t0, 3)
            result.update(changed=changed, bytes_downloaded=0, seconds=seconds)
            return result

        remove_orphans(orphans)
        disk = self._disk(bytes_to_download + copy_bytes, 0)
        result["disk"] = disk
        if (to_fetch or copy_bytes) and not disk["ok"]:
            raise DownloadError(
                "%s@%s: %s; %s. Nothing was fetched; free space on the volume, lower "
                "model_download_margin_bytes (%d), or use another volume"
                % (self.repo_id, sha, disk["msg"],
                   self._need_split(bytes_to_download, copy_bytes), self.margin_bytes),
                disk=disk,
            )
        for rf in mismatched:  # a wrong file must never stay where vLLM would load it
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.local_dir, rf.path))
        self._link_all(reuse, verified, to_fetch)

        progress = Progress(
            self.progress_file,
            self.progress_interval,
            repo_id=self.repo_id,
            revision=sha,
            total=bytes_total,
            done=sum(rf.size for rf in verified),
            files_total=len(remote),
        )
        progress.files_done = len(verified)
        self.progress = progress
        progress.start()
        downloaded = 0
        refetched = []
        state = "failed"
        try:
            if to_fetch:
                session = self.hub.utils.get_session()
                workers = min(self.max_workers, len(to_fetch))
                # Largest first: the long poles start early.
                order = sorted(to_fetch, key=lambda rf: -rf.size)
                with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
                    futures = {
                        pool.submit(self._fetch_verified, session, sha, rf, progress): rf
                        for rf in order
                    }
                    errors = []
                    for fut in concurrent.futures.as_completed(futures):
                        try:
                            n, again = fut.result()
                        except DownloadError as e:
                            self.cancel.set()
                            errors.append(e)
                            continue
                        downloaded += n
                        if again:
                            refetched.append(futures[fut].path)
                    real = [e for e in errors if e.msg != "cancelled"]
                    if real:
                        raise real[0]
            self._final_check(remote)
            state = "done"
        finally:
            progress.stop(state)

        now = time.time()
        files_entry = {}
        for rf in remote:
            st = os.stat(os.path.join(self.local_dir, rf.path))
            entry = rf.as_dict()
            entry["mtime_ns"] = st.st_mtime_ns
            files_entry[rf.path] = entry
        write_json_atomic(
            manifest_path(self.local_dir),
            {
                "version": MANIFEST_VERSION,
                "repo_id": self.repo_id,
                "revision": sha,
                "revision_requested": self.revision,
                "endpoint": self.endpoint,
                "allow_patterns": self.allow_patterns,
                "ignore_patterns": self.ignore_patterns,
                "verified_at": now,
                "bytes_total": bytes_total,
                "files": files_entry,
            },
        )
        result.update(
            changed=changed,
            bytes_downloaded=downloaded,
            files_refetched=sorted(refetched),
            retries_used=self.retries_used,
            rate_limit_waited_seconds=round(self.rate_limit_waited, 1),
            seconds=round(time.monotonic() - t0, 3),
        )
        return result

    def _copy_bytes(self, reuse):
        """Bytes the reused files take again as copies: none where the volume links.

        The plan tries a link as the run does (a type known to link can still refuse one:
        a share, a bind mount between), unless the type or an earlier try says links fail;
        not known to link: each is a copy."""
        if reuse and not self.check_mode:
            self._links_work()
        elif reuse and self.volume["hard_links"] is not False:
            self._probe_links()
        return 0 if self.volume["hard_links"] else sum(rf.size for rf, _src in reuse)

    def _enter_snapshot(self, sha):
        """With snapshots, the files of `sha` go to their own folder under the base folder."""
        if self.snapshots:
            self.local_dir = snapshot_dir(self.base_dir, sha)
            if not self.check_mode:
                os.makedirs(self.local_dir, exist_ok=True)

    def _disk(self, need, freed):
        """The disk check for `need` bytes once `freed` bytes of orphans are removed."""
        disk = disk_space.check(self.local_dir, need, self.margin_bytes, freed_bytes=freed)
        disk["free_bytes_after_cleanup"] = disk["free_bytes"]
        disk["bytes_orphaned"] = freed
        return disk

    def _link_all(self, reuse, verified, to_fetch):
        """Link (or, without hard links, copy and verify) each reusable file; one that can
        be neither is fetched after all."""
        for rf, src in reuse:
            if (self.volume["hard_links"] and self._link(src, rf)) or self._copy(src, rf):
                verified.append(rf)
            else:
                to_fetch.append(rf)

    def _link(self, src, rf):
        """Hard-link a verified copy of `rf` from another revision's folder into this one."""
        dst = os.path.join(self.local_dir, rf.path)
        self._dest_folder(rf)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.remove(dst)
            self.link(src, dst)
        except OSError:
            return False
        return True

    def _copy(self, src, rf):
        """Copy a verified file through its partial, hashing it on the way; in place only
        when the copy's hash and size are the Hub's."""
        part = partial_path(self.local_dir, rf)
        dst = os.path.join(self.local_dir, rf.path)
        h = new_hasher(rf.algorithm, rf.size)
        try:
            os.makedirs(os.path.dirname(part), exist_ok=True)
            with open(src, "rb") as fin, open_partial(part, append=False) as fout:
                for chunk in iter(lambda: fin.read(CHUNK), b""):
                    self.activity[0] += 1
                    h.update(chunk)
                    fout.write(chunk)
                fout.flush()
                os.fsync(fout.fileno())
            if h.hexdigest() != rf.expected or file_size(part) != rf.size:
                os.remove(part)
                return False
            self._dest_folder(rf)
            os.replace(part, dst)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DownloadError("no space left on device copying %s to %s (no hard links "
                                    "on %s)" % (src, dst, self.volume["fstype"]),
                                    enospc=True) from e
            with contextlib.suppress(OSError):
                os.remove(part)
            return False
        return True

    def _dest_folder(self, rf):
        """Make the folder `rf` goes into and check it is inside the model folder: a folder
        on the way that is a symbolic link (planted on a shared volume) would take the
        verified file elsewhere. Refused naming the link; nothing is written there. (A link
        planted between this check and the rename is not seen: docs/security.md.)"""
        folder = os.path.dirname(os.path.join(self.local_dir, rf.path))
        os.makedirs(folder, exist_ok=True)
        want = os.path.normpath(os.path.join(os.path.realpath(self.local_dir),
                                             os.path.dirname(rf.path)))
        got = os.path.realpath(folder)
        if got != want:
            raise DownloadError(
                "%s: its folder %s leads to %s, outside the model folder %s (a symbolic link "
                "on the way, not made by this download): nothing was written there; remove the "
                "link and run again" % (rf.path, folder, got, self.local_dir))

    def _other_writer(self, rf, part, what):
        """A partial changed under this run: another writer on the volume."""
        return (
            "%s: the partial %s %s: another writer is fetching the same file into %s. "
            "Hosts that share a models volume must name it in vllm_fleet_models_volume "
            "(a lease file then keeps them apart; this volume's flock: %s, %s)"
            % (rf.path, part, what, self.local_dir, self.volume["flock"] if self.volume else "?",
               self.volume["lock_scope_why"] if self.volume else "?"))

    def _final_check(self, remote):
        """Never report ok with a missing or short file (another writer may have changed one)."""
        for rf in remote:
            local = os.path.join(self.local_dir, rf.path)
            if not os.path.isfile(local):
                raise DownloadError(
                    "%s is missing from %s at the end of the run (the Hub lists %d bytes); "
                    "something else removed it: run again to fetch it"
                    % (rf.path, self.local_dir, rf.size)
                )
            got = file_size(local)
            if got != rf.size:
                raise DownloadError(
                    "%s is %d bytes on disk at the end of the run, the Hub lists %d; something "
                    "else changed it: run again to fetch it" % (rf.path, got, rf.size)
                )


def read_token(token, token_file):
    """Token from the option or from a file (first line); never logged."""
    if token:
        return token.strip()
    if token_file:
        try:
            with open(token_file) as f:
                return f.read().strip() or None
        except OSError as e:
            raise DownloadError("cannot read token_file %s: %s" % (token_file, e.strerror)) from e
    return None
