# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Calls to the Hub: which failures are worth another try, and how long to wait before it.

A transient failure (5xx, 408, a 429 without a reset, a dropped connection) is retried
with exponential backoff, capped, at most `retries` times in a row. A 429 that names its
reset (the Hub's RateLimit header, else Retry-After) is waited out, reset + 1 s as
huggingface_hub's own http_backoff does, without spending a retry, while the time waited
for rate limits stays within `rate_limit_wait_max` (waits of parallel files for one window
counted once); past it the download fails at once and says so. The downloader
(hf_download.py) decides what a call is and what a failure means for its files; this
module only decides whether and when to try again.
"""

import email.utils
import threading
import time

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.errors import FieldsError


class DownloadError(FieldsError):
    """A failure with a one-line message meant for fail_json(msg=...); `details` is its fields."""

    @property
    def details(self):
        """The fields under the name the download's callers have used."""
        return self.fields


class HubMissingError(DownloadError):
    """huggingface_hub cannot be imported (a host before its tools virtualenv exists)."""


class RetryableError(Exception):
    """A transient failure (5xx, connection) worth retrying."""


class RateLimitReset(object):
    """What a 429 said about the Hub's rate-limit window: seconds to its reset and the header."""

    __slots__ = ("header", "seconds")

    def __init__(self, seconds, header):
        self.seconds = seconds
        self.header = header


RATE_LIMITED = 429
# huggingface_hub's http_backoff sleeps the reset + 1 s "to avoid rounding issues"
# (huggingface_hub/utils/_http.py, _http_backoff_base); the same margin here.
RATE_LIMIT_MARGIN_S = 1
# The longest single sleep while waiting for a reset: a run cancelled by another file's
# failure stops waiting within this.
RATE_LIMIT_SLICE_S = 5.0


def _header(headers, name):
    """The value of a header by its lower-case name (httpx gives names lower-cased), or None."""
    for key in headers or {}:
        if key.lower() == name:
            return headers[key]
    return None


def rate_limit_reset(headers, parse=None, now=None):
    """The reset a 429's headers announce, as a RateLimitReset, or None when they give none.

    First the IETF RateLimit header the Hub sends (draft-ietf-httpapi-ratelimit-headers,
    ``"api";r=0;t=55``: no request remains, the window resets in 55 s), read by `parse`
    (huggingface_hub.utils.parse_ratelimit_headers) and taken, as huggingface_hub's
    http_backoff takes it, only when it says no request remains; then Retry-After, in
    seconds or as an HTTP date (RFC 9110, 10.2.3), which http_backoff does not read.
    """
    headers = headers or {}
    if parse is not None:
        info = parse(headers)
        if info is not None and info.remaining == 0:
            return RateLimitReset(
                max(int(info.reset_in_seconds), 0), "RateLimit: %s" % _header(headers, "ratelimit")
            )
    value = (_header(headers, "retry-after") or "").strip()
    if not value:
        return None
    if value.isdigit():
        return RateLimitReset(int(value), "Retry-After: %s" % value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    now = time.time() if now is None else now
    return RateLimitReset(max(round(when.timestamp() - now), 0), "Retry-After: %s" % value)


def _first_line(exc):
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _status_of(exc):
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _is_transient(hub, exc):
    """5xx / 408 / 429 answers and connection-level errors are worth another try."""
    if isinstance(exc, RetryableError):
        return True
    if isinstance(exc, hub.errors.HfHubHTTPError):
        status = _status_of(exc)
        return status is None or status >= 500 or status in (408, 429)  # noqa: PLR2004
    transport = getattr(_httpx(), "TransportError", None)
    if transport and isinstance(exc, transport):
        return True
    return isinstance(exc, (ConnectionError, TimeoutError, EOFError))


def _httpx():
    """The HTTP library behind huggingface_hub's session (httpx2 in 2.x, httpx in 1.x)."""
    for name in ("httpx2", "httpx"):
        try:
            return __import__(name)
        except ImportError:
            continue
    return None


class HubRetry(object):
    """The retry policy of one download: backoff `backoff` * 2**attempt, at most
    `backoff_max`; `sleep` and `clock` are the host's; `cancel` (a threading.Event) ends a
    wait when another file failed. `budget_message(path, reset, total)` says why a reset is
    not waited for (the downloader's words: its repo, its folder, its token). Counts
    `retries_used` and `rate_limit_waited` (seconds, wall time) for the result."""

    def __init__(self, *, retries, backoff, backoff_max, rate_limit_wait_max, sleep, clock,
                 cancel, budget_message):
        self.retries = max(0, int(retries))
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.rate_limit_wait_max = max(0.0, float(rate_limit_wait_max))
        self.sleep = sleep
        self.clock = clock
        self.cancel = cancel
        self.budget_message = budget_message
        self.retries_used = 0
        self.rate_limit_waited = 0.0
        self._rate_limited_until = None
        self._lock = threading.Lock()

    def backoff_s(self, attempt):
        return min(self.backoff * (2**attempt), self.backoff_max)

    def call(self, fn, hub, progress=None):
        """fn(), tried again on a transient failure (a DownloadError is final)."""
        attempt = 0
        while True:
            try:
                return fn()
            except DownloadError:
                raise
            except Exception as e:
                if self.wait_rate_limit(e, None, hub, progress):
                    continue  # the Hub's reset waited out: no retry spent
                if not _is_transient(hub, e) or attempt >= self.retries:
                    raise
                self.spend(attempt)
                attempt += 1

    def spend(self, attempt, path=None, progress=None):
        """One retry of `path` (None: a metadata call) after `attempt` failed: counted, shown,
        backed off."""
        with self._lock:
            self.retries_used += 1
        if progress is not None and path is not None:
            progress.note_retry(path)
        self.sleep(self.backoff_s(attempt))

    def wait_rate_limit(self, exc, path, hub, progress=None):
        """On a 429 that names its reset, wait it out (+1 s) and return True.

        False for anything else (a 429 without a reset header is backed off like a 5xx).
        The waits are counted on the wall clock, a wait that overlaps another file's counted
        once; one that would take the total beyond rate_limit_wait_max fails at once.
        """
        if _status_of(exc) != RATE_LIMITED:
            return False
        response = getattr(exc, "response", None)
        parse = getattr(getattr(hub, "utils", None), "parse_ratelimit_headers", None)
        reset = rate_limit_reset(getattr(response, "headers", None), parse)
        if reset is None:
            return False
        wait = float(reset.seconds + RATE_LIMIT_MARGIN_S)
        with self._lock:
            now = self.clock()
            until = now + wait
            since = max(now, self._rate_limited_until or now)
            total = self.rate_limit_waited + max(until - since, 0.0)
            if total > self.rate_limit_wait_max:
                raise DownloadError(
                    self.budget_message(path, reset, total), rate_limit=reset.header,
                    rate_limit_reset_seconds=reset.seconds,
                    rate_limit_waited_seconds=round(self.rate_limit_waited, 1),
                ) from exc
            self.rate_limit_waited = total
            self._rate_limited_until = max(until, self._rate_limited_until or until)
        if progress is not None:
            progress.note_rate_limit(path, wait, reset, total)
        left = wait
        while left > 0 and not self.cancel.is_set():
            step = min(left, RATE_LIMIT_SLICE_S)
            self.sleep(step)
            left -= step
        if progress is not None:
            progress.rate_limit_over(path)
        if self.cancel.is_set():
            raise DownloadError("cancelled")
        return True
