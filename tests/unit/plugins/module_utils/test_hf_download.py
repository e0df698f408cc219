# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Pure parts of module_utils/download/hf_download.py (no server)."""

import hashlib
import json
import os
import sys

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import hf_download as m
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import hub_calls


def test_git_blob_id_matches_git_and_huggingface_hub(tmp_path):
    f = tmp_path / "x"
    f.write_bytes(b"Hello, World!")
    # `printf 'Hello, World!' | git hash-object --stdin`
    assert m.hash_file(str(f), "git-sha1", 13) == "b45ef6fec89518d314f546fd6c3025367b721684"
    hf = pytest.importorskip("huggingface_hub.utils.sha")
    assert m.hash_file(str(f), "git-sha1", 13) == hf.git_hash(b"Hello, World!")


def test_sha256_and_parallel_verify(tmp_path):
    pairs = []
    for i in range(5):
        data = os.urandom(300_000 + i)
        p = tmp_path / f"f{i}"
        p.write_bytes(data)
        rf = m.RemoteFile(f"f{i}", len(data), "b" * 40, hashlib.sha256(data).hexdigest())
        pairs.append((rf, str(p)))
    got = m.verify_files(pairs, workers=3)
    assert got == {rf.path: rf.expected for rf, _unused in pairs}


def test_remote_file_picks_algorithm():
    assert m.RemoteFile("a", 1, "AB" * 20).algorithm == "git-sha1"
    assert m.RemoteFile("a", 1, "AB" * 20).expected == "ab" * 20
    assert m.RemoteFile("a", 1, "ab" * 20, "CD" * 32).expected == "cd" * 32


def _manifest_for(tmp_path, rf, revision="a" * 40):
    p = tmp_path / rf.path
    entry = rf.as_dict()
    entry["mtime_ns"] = p.stat().st_mtime_ns
    return {"version": 1, "revision": revision, "files": {rf.path: entry}}


def test_manifest_trust_needs_same_revision_size_hash_and_mtime(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"x" * 10)
    rf = m.RemoteFile("w.bin", 10, "c" * 40)
    manifest = _manifest_for(tmp_path, rf)
    local = str(tmp_path / "w.bin")
    assert m.trusted_by_manifest(manifest, "a" * 40, rf, local) is True
    assert m.trusted_by_manifest(manifest, "b" * 40, rf, local) is False
    assert (
        m.trusted_by_manifest(manifest, "a" * 40, m.RemoteFile("w.bin", 10, "d" * 40), local)
        is False
    )
    os.utime(local, ns=(0, 12345))
    assert m.trusted_by_manifest(manifest, "a" * 40, rf, local) is False


def test_manifest_of_other_version_is_ignored(tmp_path):
    (tmp_path / m.MANIFEST_NAME).write_text(json.dumps({"version": 0, "revision": "x"}))
    assert m.load_manifest(str(tmp_path)) == {}
    (tmp_path / m.MANIFEST_NAME).write_text("{not json")
    assert m.load_manifest(str(tmp_path)) == {}


def test_partial_name_is_stable_and_content_keyed(tmp_path):
    a = m.RemoteFile("sub/x.safetensors", 5, "b" * 40, "0123456789abcdef" + "f" * 48)
    p = m.partial_path(str(tmp_path), a)
    assert p == str(
        tmp_path / ".cache/vllm-fleet/partial/sub/x.safetensors.0123456789abcdef.partial"
    )
    assert m.partial_path(str(tmp_path), a) == p


def test_lock_is_exclusive_across_processes(tmp_path):
    import subprocess

    with m.model_lock(str(tmp_path)) as waited:
        assert waited < 1
        code = (
            "import fcntl, os, sys\n"
            "fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('free')\n"
            "except OSError:\n    print('held')\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / m.LOCK_NAME)],
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == "held"
        assert (tmp_path / m.LOCK_NAME).read_text().strip() == str(os.getpid())


def test_missing_huggingface_hub_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(m.HubMissingError, match=r"huggingface_hub is not importable by .*python"):
        m.import_hub()
    missing = f"no virtualenv of this Python at {tmp_path}/tools"
    with pytest.raises(m.HubMissingError, match=missing):
        m.import_hub(str(tmp_path / "tools"))


def test_hub_venv_joins_the_import_path(monkeypatch, tmp_path):
    """A virtualenv of this Python: its site-packages is searched for huggingface_hub."""
    site = tmp_path / "tools" / "lib" / ("python%d.%d" % sys.version_info[:2]) / "site-packages"
    site.mkdir(parents=True)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert m.venv_site_packages(str(tmp_path / "tools")) == str(site)
    m.import_hub(str(tmp_path / "tools"))
    assert str(site) in sys.path


def test_read_token_prefers_option_and_reads_file(tmp_path):
    f = tmp_path / "tok"
    f.write_text("hf_abc\n")
    assert m.read_token(None, str(f)) == "hf_abc"
    assert m.read_token(" hf_x ", None) == "hf_x"
    assert m.read_token(None, None) is None
    with pytest.raises(m.DownloadError, match="cannot read token_file"):
        m.read_token(None, str(tmp_path / "missing"))


class _Answer:
    """The two attributes of an httpx response that the size check reads (synthetic)."""

    def __init__(self, status_code, **headers):
        self.status_code = status_code
        self.headers = {k.replace("_", "-"): v for k, v in headers.items()}


SHARD = m.RemoteFile("model.safetensors", 1000, "b" * 40, "c" * 64)


@pytest.mark.parametrize(
    "answer",
    [
        _Answer(200, Content_Length="1000"),
        _Answer(206, Content_Range="bytes 400-999/1000", Content_Length="600"),
        # A 206 may carry less than asked (RFC 9110, 14.4): the connection loop asks again.
        _Answer(206, Content_Range="bytes 400-499/1000", Content_Length="100"),
        # A compressed body's Content-Length counts compressed bytes: not the file's size.
        _Answer(200, Content_Length="310", Content_Encoding="gzip"),
        _Answer(200),  # no length: counted while it streams
    ],
    ids=["200", "206", "206-short", "gzip", "no-length"],
)
def test_announced_size_that_fits_the_listing_passes(answer):
    have = 400 if answer.status_code == 206 else 0
    assert m.RangeFetch.check_announced_size(answer, SHARD, have) is None


@pytest.mark.parametrize(
    ("answer", "have", "msg"),
    [
        (
            _Answer(200, Content_Length="1001"),
            0,
            (
                "model.safetensors: the Hub lists 1000 bytes, the server sends 1001 "
                "(Content-Length); nothing of this answer was written"
            ),
        ),
        (
            _Answer(200, Content_Length="999"),
            0,
            (
                "model.safetensors: the Hub lists 1000 bytes, the server sends 999 "
                "(Content-Length); nothing of this answer was written"
            ),
        ),
        (
            _Answer(206, Content_Range="bytes 400-1499/1500"),
            400,
            (
                "model.safetensors: the Hub lists 1000 bytes, the server sends 1500 "
                "(Content-Range bytes 400-1499/1500); nothing of this answer was written"
            ),
        ),
        (
            _Answer(206, Content_Range="bytes 0-999/1000"),
            400,
            (
                "model.safetensors: asked for the bytes from 400, the server sent a range from 0 "
                "(Content-Range bytes 0-999/1000); nothing of this answer was written"
            ),
        ),
    ],
    ids=["longer", "shorter", "range-total", "range-start"],
)
def test_announced_size_against_the_listing_fails_naming_the_file_and_sizes(answer, have, msg):
    with pytest.raises(m.DownloadError) as exc:
        m.RangeFetch.check_announced_size(answer, SHARD, have)
    assert exc.value.msg == msg


# --- the Hub's rate-limit reset (issue 34, 4(e)) ---------------------------------------------
# The headers as the Hub sends them (huggingface/hub-docs docs/hub/rate-limits.md, "HTTP
# Headers"), read by huggingface_hub's own parser; Retry-After per RFC 9110, 10.2.3.

def _parser():
    hub_utils = pytest.importorskip("huggingface_hub.utils")
    return hub_utils.parse_ratelimit_headers


def test_rate_limit_reset_from_the_hubs_ratelimit_headers():
    headers = {"RateLimit": '"api";r=0;t=55',
               "RateLimit-Policy": '"fixed window";"api";q=500;w=300'}
    reset = hub_calls.rate_limit_reset(headers, _parser())
    assert (reset.seconds, reset.header) == (55, 'RateLimit: "api";r=0;t=55')
    # httpx hands the names lower-cased; the header is named the same
    lower = {k.lower(): v for k, v in headers.items()}
    assert hub_calls.rate_limit_reset(lower, _parser()).header == 'RateLimit: "api";r=0;t=55'


def test_rate_limit_reset_takes_ratelimit_over_retry_after_and_only_when_none_remains():
    both = {"ratelimit": '"resolvers";r=0;t=120', "retry-after": "7"}
    assert hub_calls.rate_limit_reset(both, _parser()).seconds == 120
    # requests remain: huggingface_hub's http_backoff then reads Retry-After, so do we
    left = {"ratelimit": '"resolvers";r=3;t=120', "retry-after": "7"}
    assert hub_calls.rate_limit_reset(left, _parser()).header == "Retry-After: 7"
    assert hub_calls.rate_limit_reset({"ratelimit": '"resolvers";r=3;t=120'}, _parser()) is None


def test_rate_limit_reset_from_retry_after_seconds_and_http_date():
    assert hub_calls.rate_limit_reset({"Retry-After": "30"}, _parser()).seconds == 30
    # RFC 9110's own example date; `now` 90 s before it
    now = 784111777 - 90
    reset = hub_calls.rate_limit_reset({"Retry-After": "Sun, 06 Nov 1994 08:49:37 GMT"}, None,
                                       now=now)
    assert (reset.seconds, reset.header) == (90, "Retry-After: Sun, 06 Nov 1994 08:49:37 GMT")
    past = hub_calls.rate_limit_reset({"Retry-After": "Sun, 06 Nov 1994 08:49:37 GMT"}, None,
                                      now=now + 1000)
    assert past.seconds == 0


def test_rate_limit_reset_none_without_a_usable_header_or_parser():
    assert hub_calls.rate_limit_reset({}, _parser()) is None
    assert hub_calls.rate_limit_reset(None, _parser()) is None
    assert hub_calls.rate_limit_reset({"Retry-After": "soon"}, _parser()) is None
    assert hub_calls.rate_limit_reset({"X-Error-Message": "Too many requests"}, _parser()) is None
    # no parser (an older huggingface_hub): RateLimit is not read, Retry-After still is
    assert hub_calls.rate_limit_reset({"ratelimit": '"api";r=0;t=55'}, None) is None
    both = {"ratelimit": '"api";r=0;t=55', "retry-after": "9"}
    assert hub_calls.rate_limit_reset(both, None).seconds == 9


class _Resp(object):
    def __init__(self, headers):
        self.status_code = 429
        self.headers = headers


class _Http429Error(Exception):
    def __init__(self, headers):
        super().__init__("429 Client Error: Too Many Requests")
        self.response = _Resp(headers)


def test_parallel_waits_for_one_window_count_once_and_the_bound_holds(tmp_path):
    """Files waiting for the same reset at the same time count its wall time once."""
    hub_utils = pytest.importorskip("huggingface_hub.utils")
    sleeps = []
    d = m.HfDownloader("o/x", str(tmp_path), sleep=sleeps.append, clock=lambda: 50.0,
                       rate_limit_wait_max=100)
    d.hub = type("Hub", (), {"utils": hub_utils})
    t55 = _Http429Error({"ratelimit": '"resolvers";r=0;t=55'})
    assert d.retry.wait_rate_limit(t55, "a", d.hub)
    assert d.retry.wait_rate_limit(t55, "b", d.hub)  # the same window, same instant
    assert d.rate_limit_waited == 56.0
    assert sum(sleeps) == 112  # each file sleeps its own wait
    # a later reset extends the window by 44 s: 100 in all, within the bound
    assert d.retry.wait_rate_limit(_Http429Error({"retry-after": "99"}), "c", d.hub)
    assert d.rate_limit_waited == 100.0
    with pytest.raises(m.DownloadError) as exc:
        d.retry.wait_rate_limit(_Http429Error({"retry-after": "100"}), "d", d.hub)
    assert "would take the time waited for rate limits to 101 s" in exc.value.msg
    assert not d.retry.wait_rate_limit(_Http429Error({}), "e", d.hub)  # no reset: backoff
    other = _Http429Error({"retry-after": "5"})
    other.response.status_code = 503
    assert not d.retry.wait_rate_limit(other, "f", d.hub)  # only a 429 is a rate limit


def test_a_bound_of_zero_never_waits(tmp_path):
    hub_utils = pytest.importorskip("huggingface_hub.utils")
    sleeps = []
    d = m.HfDownloader("o/x", str(tmp_path), sleep=sleeps.append, rate_limit_wait_max=0)
    d.hub = type("Hub", (), {"utils": hub_utils})
    with pytest.raises(m.DownloadError) as exc:
        d.retry.wait_rate_limit(_Http429Error({"retry-after": "0"}), "a", d.hub)
    assert "beyond rate_limit_wait_max 0 s" in exc.value.msg
    assert sleeps == []


def test_progress_shows_the_wait_that_ends_last_until_every_wait_is_over():
    p = m.Progress(None, 10, repo_id="o/x", revision="a" * 40, total=10, done=0, files_total=2)
    reset = hub_calls.RateLimitReset(55, 'RateLimit: "resolvers";r=0;t=55')
    p.note_rate_limit("a", 56.0, reset, 56.0)
    p.note_rate_limit("b", 121.0, hub_calls.RateLimitReset(120, "Retry-After: 120"), 121.0)
    snap = p.snapshot()
    assert snap["rate_limited"]["file"] == "b"
    assert snap["rate_limited"]["header"] == "Retry-After: 120"
    assert snap["rate_limit_waited_seconds"] == 121.0
    p.rate_limit_over("b")
    assert p.snapshot()["rate_limited"]["file"] == "a"  # a still waits
    p.rate_limit_over("a")
    assert "rate_limited" not in p.snapshot()
