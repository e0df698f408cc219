# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
# The work is done by the action plugin of the same name (plugins/action/async_follow.py),
# on the controller; this file holds its documentation.

DOCUMENTATION = r"""
---
module: async_follow
short_description: Wait for an asynchronous job and print its progress while it runs
version_added: 0.2.0
description:
  - Ansible's own async polling, with a line of progress every O(interval) seconds in the normal
    output. The job's module writes a JSON progress file on the host; this action reads it with
    M(ansible.builtin.slurp) between two M(ansible.builtin.async_status) checks.
  - Returns the job's own result (changed, failed, its return values) once it finishes, like a
    task that ran synchronously, and removes the job's status file.
options:
  jid:
    description: The job id (C(ansible_job_id) of a task run with C(async) and C(poll=0)).
    type: str
    required: true
  progress_file:
    description: JSON progress file the job writes on the host; unset, only the elapsed time is shown.
    type: path
  kind:
    description: How to read the progress file.
    type: str
    choices: [download, start]
    default: download
  interval:
    description:
      - Seconds between two progress lines.
      - The job's status is checked every 2 seconds (or every O(interval) if shorter), so a job
        that ended is returned within that, not up to an interval later.
    type: float
    default: 10
  timeout:
    description: Seconds to wait in all before giving up (the job keeps running on the host).
    type: int
    default: 86400
attributes:
  check_mode:
    support: none
    description: There is no job to follow in check mode; run the job's module in check mode instead.
  diff_mode:
    support: none
    description: Reports the job's result, no diff of its own.
author:
  - vllm-fleet maintainers (@vllm-fleet)
"""

EXAMPLES = r"""
- name: Start the download on the host
  vllm_fleet.fleet.hf_download:
    repo_id: MiniMaxAI/MiniMax-M2.5
    local_dir: /srv/models/MiniMaxAI/MiniMax-M2.5
    progress_file: /srv/models/MiniMaxAI/MiniMax-M2.5/.vllm-fleet-progress.json
  async: 86400
  poll: 0
  register: job

- name: Follow the download
  vllm_fleet.fleet.async_follow:
    jid: "{{ job.ansible_job_id }}"
    progress_file: /srv/models/MiniMaxAI/MiniMax-M2.5/.vllm-fleet-progress.json
    kind: download
  register: download
"""

RETURN = r"""
elapsed_s:
  description: Seconds this action waited for the job.
  returned: always
  type: float
_job_result:
  description: Every key of the job's own result is returned as is (changed, failed, msg, ...).
  returned: when the job finished
  type: raw
"""
