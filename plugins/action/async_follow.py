# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Follow an asynchronous job on the host, printing its progress, and return its result.

Documented in plugins/modules/async_follow.py (ansible-doc reads it there).
"""

import base64
import json
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.progress import (
    LINES,
    progress_line,
)

display = Display()

_MISSING_TRIES = 3
# Seconds between two checks of the job's status: a job that ended is seen within this,
# whatever the progress lines' interval (with one check an interval, a 10 s interval
# kept every switch and download waiting 5 s on average after it had ended).
_POLL_S = 2.0
_JOB_KEYS = ("ansible_job_id", "started", "finished", "results_file", "stdout_lines",
             "stderr_lines")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("jid", "progress_file", "kind", "interval", "timeout"))

    def _status(self, jid, async_dir, task_vars, mode="status"):
        return self._execute_module(module_name="ansible.legacy.async_status",
                                    module_args={"jid": jid, "mode": mode, "_async_dir": async_dir},
                                    task_vars=task_vars)

    def _progress(self, path, task_vars):
        got = self._execute_module(module_name="ansible.legacy.slurp",
                                   module_args={"src": path}, task_vars=task_vars)
        if got.get("failed") or "content" not in got:
            return None
        try:
            return json.loads(base64.b64decode(got["content"]))
        except ValueError:
            return None  # caught between two writes of the file

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        if self._task.check_mode:
            raise AnsibleActionFail("async_follow has no job to follow in check mode")
        _valid, args = self.validate_argument_spec(argument_spec={
            "jid": {"type": "str", "required": True},
            "progress_file": {"type": "path"},
            "kind": {"type": "str", "choices": sorted(LINES), "default": "download"},
            "interval": {"type": "float", "default": 10.0},
            "timeout": {"type": "int", "default": 86400},
        })
        host = task_vars.get("inventory_hostname", "?")
        # The job's status file, as the async task that started the job placed it.
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir",
                                                                   default="~/.ansible_async"))
        start = time.monotonic()
        poll = min(_POLL_S, args["interval"])
        # A quick first look: a job with nothing to do is done before the first check.
        wait = min(0.5, poll)
        next_line = 0.0  # the elapsed time from which the next progress line is due
        last = None
        missing = 0
        while True:
            time.sleep(wait)
            wait = poll
            status = self._status(args["jid"], async_dir, task_vars)
            elapsed = round(time.monotonic() - start, 1)
            if status.get("msg") == "could not find job" and missing < _MISSING_TRIES:
                # Read again before giving up: one answer of a loaded host is not the job's end.
                missing += 1
                continue
            missing = 0
            if status.get("finished") or (status.get("failed") and not status.get("started")):
                if status.get("msg") == "could not find job":
                    status["msg"] = (f"the status file of job {args['jid']} is not in "
                                     f"{async_dir} on {host} (read {_MISSING_TRIES + 1} times)")
                    result.update(status, elapsed_s=elapsed)
                    return result
                self._status(args["jid"], async_dir, task_vars, mode="cleanup")
                job = {k: v for k, v in status.items() if k not in _JOB_KEYS}
                result.update(job)
                result["elapsed_s"] = elapsed
                return result
            if elapsed > args["timeout"]:
                result.update(failed=True, elapsed_s=elapsed, msg=(
                    f"job {args['jid']} not finished after {args['timeout']} s (timeout); it keeps "
                    f"running on the host, and a re-run of the play picks its work up"))
                return result
            if elapsed < next_line:
                continue
            next_line = elapsed + args["interval"]
            line = None
            if args["progress_file"]:
                line = progress_line(args["kind"], self._progress(args["progress_file"], task_vars))
            line = line or f"running for {int(elapsed)} s"
            if line != last:
                display.display(f"  {host}: {line}")
                last = line
