# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""A model's fingerprint: what it computes for one fixed request, greedy (issue 44, case 1).

Taken from blue while it is drained, just before it sleeps, and kept with the sleeper in
the deployment record; after any wake the same request must give the same token ids, and
their logprobs within LOGPROB_TOLERANCE. A wake that returns garbage with every call
answering 200 passes a gate that counts tokens: NVIDIA-NeMo/RL #2631 (level 2 diverges at
token 0), vllm #48312 / PR #49695 (a stale MoE permute cache after reload), vllm PR #54235
('!!!!!!!!!!!!' on 2x RTX PRO 6000), vllm #53888 (LoRA state lost after a level-1 wake).

What it proves: the woken process computes, for this prompt and these tokens, what it
computed before it slept (weights, the KV cache path, the sampler). What it does not: other
prompts, longer contexts, batches, or adapters it was not asked about; a fault that shows
only past these tokens is not seen.

The request is vLLM 0.32's /v1/completions with `temperature: 0`, `logprobs: 0` (the
chosen token's logprob), `return_token_ids: true` (choices[0].token_ids) and `ignore_eos`
(always FINGERPRINT_TOKENS tokens) and a fresh `cache_salt` (no prefix-cache hit):
vllm/entrypoints/openai/completion/protocol.py.
"""

import json
import uuid

from ansible_collections.vllm_fleet.fleet.plugins.module_utils.common.errors import FieldsError

HTTP_OK = 200
FINGERPRINT_PROMPT = "vllm-fleet fingerprint: the numbers from one to twenty are"
FINGERPRINT_TOKENS = 24
# Greedy decoding of one request on the same process and weights is deterministic up to
# the kernels' reduction order; a level-1 wake restores the weights byte for byte, a level-2
# wake rereads the same files. 1e-3 nats is far below what a token flip moves (a changed
# argmax) and above float32 reduction noise; it is not yet a measured figure (the GPU lab's
# runs should record the largest difference seen, issue 44).
LOGPROB_TOLERANCE = 1e-3
SHOWN = 5  # changed tokens a message names


class FingerprintError(FieldsError):
    """No fingerprint could be taken: the model's wake cannot be trusted."""


def payload(served_model_name):
    """The request. A fresh `cache_salt` each time: a prefix-cache hit computes the prompt on
    another kernel path than a miss, so both fingerprints are computed from scratch."""
    return {"model": served_model_name, "prompt": FINGERPRINT_PROMPT,
            "max_tokens": FINGERPRINT_TOKENS, "temperature": 0, "logprobs": 0,
            "return_token_ids": True, "ignore_eos": True, "cache_salt": uuid.uuid4().hex}


def take(base_url, served_model_name, request, timeout=60.0):
    """{"prompt", "token_ids", "logprobs"} from the model at `base_url`; FingerprintError
    when the answer does not carry them (no completion route, an older vLLM)."""
    res = request("POST", base_url.rstrip("/") + "/v1/completions",
                  payload(served_model_name), timeout)
    if res.status != HTTP_OK:
        raise FingerprintError(f"POST /v1/completions for its fingerprint answered "
                               f"{res.status or res.error} {res.body[:200]}".rstrip())
    try:
        choice = json.loads(res.body)["choices"][0]
        ids = [int(t) for t in choice["token_ids"]]
        logprobs = [float(p) for p in choice["logprobs"]["token_logprobs"]]
    except (ValueError, KeyError, IndexError, TypeError):
        raise FingerprintError(f"POST /v1/completions for its fingerprint: no token ids and "
                               f"logprobs in {res.body[:200]!r}") from None
    if not ids or len(ids) != len(logprobs):
        raise FingerprintError(f"POST /v1/completions for its fingerprint gave {len(ids)} "
                               f"token ids and {len(logprobs)} logprobs")
    return {"prompt": FINGERPRINT_PROMPT, "token_ids": ids,
            "logprobs": [round(p, 6) for p in logprobs]}


def differs(before, now, tolerance=LOGPROB_TOLERANCE):
    """None when `now` matches `before`, else what differs (which tokens, which logprobs)."""
    ids_b, ids_n = before.get("token_ids") or [], now.get("token_ids") or []
    flipped = [i for i in range(max(len(ids_b), len(ids_n)))
               if i >= len(ids_b) or i >= len(ids_n) or ids_b[i] != ids_n[i]]
    if flipped:
        shown = ", ".join(
            f"#{i} {ids_b[i] if i < len(ids_b) else '-'}->{ids_n[i] if i < len(ids_n) else '-'}"
            for i in flipped[:SHOWN])
        more = f" and {len(flipped) - SHOWN} more" if len(flipped) > SHOWN else ""
        return (f"its fingerprint differs: {len(flipped)} of {len(ids_b)} greedy tokens "
                f"changed (position before->now: {shown}{more})")
    lp_b, lp_n = before.get("logprobs") or [], now.get("logprobs") or []
    drift = [(i, abs(a - b)) for i, (a, b) in enumerate(zip(lp_b, lp_n, strict=False))
             if abs(a - b) > tolerance]
    if drift:
        i, worst = max(drift, key=lambda d: d[1])
        return (f"its fingerprint differs: the same tokens, but {len(drift)} logprob(s) moved "
                f"more than {tolerance:g} (largest {worst:.4g} at token #{i})")
    return None
