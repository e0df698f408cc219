# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The error that carries fields: one message for fail_json(msg=...) and the values beside it.

Every module_utils error raised to a module entry point (a unit's systemctl call, the front
door's nginx -t, the switch, the smoke test, the download, ...) has this shape: `msg` is the
one-line message, `fields` the result keys that go with it (rc, stdout, stderr, what was
wanted and found), so an entry point can answer `fail_json(msg=exc.msg, **exc.fields)`.
Each concern keeps its own subclass, so an `except` names what it expects.

Standard library only: it ships beside the probe on hosts (roles/vllm_service/tasks/probe.yml),
where the files that import it find it as a plain module.
"""


class FieldsError(Exception):
    """A failure with a message (`msg`, also str(exc)) and the result fields that go with it."""

    def __init__(self, msg, **fields):
        super().__init__(msg)
        self.msg = msg
        self.fields = fields
