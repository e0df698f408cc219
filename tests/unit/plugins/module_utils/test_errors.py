# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Issue 47 item 3: the error with fields has one home (module_utils/common/errors.py).

Each concern's error is a FieldsError under its own name and import path: `msg` and str()
are the message, `fields` the result keys for fail_json, and any extra a class had stays.
"""

from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common import errors
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.download import hf_download
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fleet import haproxy_state
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.frontdoor import frontdoor, hold_room
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.gpu import gpu_smoke
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.switch import (
    cutover,
    fingerprint,
    switch_lock,
    units,
)

ERRORS = [cutover.CutoverError, units.UnitError, frontdoor.FrontDoorError,
          haproxy_state.StateError, gpu_smoke.SmokeError, hf_download.DownloadError,
          hf_download.HubMissingError, fingerprint.FingerprintError, hold_room.HoldRoomError]


@pytest.mark.parametrize("cls", [*ERRORS, switch_lock.SwitchBusyError],
                         ids=lambda cls: cls.__name__)
def test_each_error_is_a_fields_error_with_its_message(cls):
    exc = cls("nginx -t failed")
    assert isinstance(exc, errors.FieldsError)
    assert (exc.msg, str(exc), exc.args) == ("nginx -t failed",) * 2 + (("nginx -t failed",),)


@pytest.mark.parametrize("cls", ERRORS, ids=lambda cls: cls.__name__)
def test_each_error_keeps_its_fields(cls):
    assert cls("nginx -t failed", rc=1, stderr="emerg").fields == {"rc": 1, "stderr": "emerg"}
    assert cls("nginx -t failed").fields == {}


def test_the_extras_stay():
    busy = switch_lock.SwitchBusyError("held", {"pid": 7})
    assert (busy.holder, busy.fields) == ({"pid": 7}, {"holder": {"pid": 7}})
    assert switch_lock.SwitchBusyError("held").holder is None
    failed = hf_download.DownloadError("HTTP 429", rate_limit_reset_seconds=900)
    assert failed.details is failed.fields
    assert failed.details == {"rate_limit_reset_seconds": 900}


def test_no_module_keeps_a_copy_of_the_shape():
    folder = Path(errors.__file__).parent
    copies = [p.name for p in sorted(folder.glob("*.py"))
              if p.name != "errors.py" and "self.fields = fields" in p.read_text(encoding="utf-8")]
    assert copies == []
