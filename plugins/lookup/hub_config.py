# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Lookup hub_config: a model's config.json (and hf_quant_config.json) from the Hub."""

DOCUMENTATION = r"""
name: hub_config
author:
  - vllm-fleet maintainers (@vllm-fleet)
short_description: Read a model's config.json and hf_quant_config.json from the Hugging Face Hub
description:
  - Downloads C(config.json), and C(hf_quant_config.json) where the repository has one, of a
    model at a revision with C(huggingface_hub.hf_hub_download) in the controller's Python
    (into the Hugging Face cache; C(HF_HOME), C(HF_ENDPOINT), C(HF_TOKEN) and
    C(HF_HUB_OFFLINE) are honoured). No weights are read.
  - Never fails the task. A file it cannot read (no network, no such revision, a gated
    repository without a token, C(huggingface_hub) not installed) is reported in C(error), so
    the caller (the vllm_model role's preflight) can refuse the model or go on unsized.
  - Read-only for the play's purpose; runs in check mode like any lookup.
options:
  _terms:
    description: The repository id (C(org/name)); one per lookup.
    required: true
    type: list
    elements: str
  revision:
    description: Branch, tag or 40-hex commit.
    type: str
    default: main
  endpoint:
    description: Hub endpoint (a mirror, the lab Hub); empty for C(HF_ENDPOINT) or huggingface.co.
    type: str
    default: ""
  token:
    description: Access token for a gated repository; empty for C(HF_TOKEN) or the cached login.
      It is used for the requests only, never returned.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Read config.json of a model at its pinned revision
  ansible.builtin.set_fact:
    model_files: >-
      {{ lookup('vllm_fleet.fleet.hub_config', 'MiniMaxAI/MiniMax-M2.5',
                revision='f710177d938eff80b684d42c5aa84b382612f21f') }}
"""

RETURN = r"""
_raw:
  description: One dict per term.
  type: list
  elements: dict
  contains:
    repo_id:
      description: The repository id.
      type: str
    revision:
      description: The revision asked for.
      type: str
    config:
      description: The parsed config.json; null when it could not be read.
      type: dict
    hf_quant_config:
      description: The parsed hf_quant_config.json; null when the repository has none.
      type: dict
    source:
      description: Where the files were read (endpoint, repository and revision).
      type: str
    error:
      description: Null, or what could not be read, at which revision and why.
      type: str
"""

import sys

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.fit.hub_config import (
    fetch_model_configs,
)


def _hub_download():
    try:
        from huggingface_hub import hf_hub_download  # optional on the controller
    except ImportError:
        return None
    return hf_hub_download


class LookupModule(LookupBase):
    """vllm_fleet.fleet.hub_config"""

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        if len(terms) != 1:
            raise AnsibleLookupError(f"hub_config wants one repository id, got {terms!r}")
        repo_id, revision = str(terms[0]), self.get_option("revision")
        download = _hub_download()
        if download is None:
            return [{"repo_id": repo_id, "revision": revision, "config": None,
                     "hf_quant_config": None, "source": None,
                     "error": (f"config.json of {repo_id} at revision {revision} could not be "
                               "read: huggingface_hub is not installed in the controller's "
                               f"Python ({sys.executable}); pip install huggingface_hub")}]
        return [fetch_model_configs(repo_id, revision, download,
                                    endpoint=self.get_option("endpoint"),
                                    token=self.get_option("token"))]
