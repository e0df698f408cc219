# Copyright (c) 2026 vllm-fleet contributors
# SPDX-License-Identifier: Apache-2.0
"""A stand-in for `vllm serve` (the GPU suite's own test, no GPU): the routes the suite
and the product's switch call, with the memory nvidia-smi would show written for
fake_nvidia_smi.py. `serve PATH --port P --served-model-name N ...`; a model whose name
holds "minimax" fails its level-2 wake (500, then exits), as vLLM 0.26.0 did on the GPU."""

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

ARGS = sys.argv[1:]
NAME = ARGS[ARGS.index("--served-model-name") + 1]
PORT = int(ARGS[ARGS.index("--port") + 1])
SMI = Path(os.environ["FAKE_SMI_DIR"])
STATE = {"asleep": 0}
AWAKE_MIB, ASLEEP_MIB = 70000, 2200


def publish():
    # temp + rename: the stand-in nvidia-smi, run at any moment, never reads a half-written
    # file (a truncated one read as no process: the suite's own test failed 1 run in 2)
    tmp = SMI / f".{os.getpid()}.tmp"
    tmp.write_text(str(ASLEEP_MIB if STATE["asleep"] else AWAKE_MIB))
    os.replace(tmp, SMI / str(os.getpid()))


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *_args):
        return

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = urlsplit(self.path).path
        if path == "/health":
            return self.answer(200, {})
        if path == "/v1/models":
            return self.answer(200, {"data": [{"id": NAME}]})
        if path == "/is_sleeping":
            return self.answer(200, {"is_sleeping": bool(STATE["asleep"])})
        if path == "/load":
            return self.answer(200, {"server_load": 0})
        return self.answer(404, {})

    def do_POST(self):
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if url.path == "/sleep":
            STATE["asleep"] = int(query.get("level", ["1"])[0])
        elif url.path == "/wake_up":
            STATE["asleep"] = 0 if "weights" not in query.get("tags", []) else STATE["asleep"]
        elif url.path == "/collective_rpc" and "minimax" in NAME:
            self.answer(500, {"error": "'functools.partial' object has no attribute "
                                       "'__name__'"})
            print("AttributeError: 'functools.partial' object has no attribute '__name__'",
                  flush=True)
            os._exit(1)
        elif url.path == "/v1/completions":
            ids = [(7 * i + len(NAME)) % 1000 for i in range(int(body.get("max_tokens", 4)))]
            choice = {"text": "x" * len(ids), "logprobs": {
                "tokens": [f"token_id:{i}" for i in ids], "token_logprobs": [-0.5] * len(ids)}}
            if body.get("return_token_ids"):  # the product's fingerprint asks for them
                choice["token_ids"] = ids
            return self.answer(200, {"choices": [choice],
                                     "usage": {"completion_tokens": len(ids)}})
        publish()
        return self.answer(200, {})


if __name__ == "__main__":
    print("Loading weights took 1.50 seconds", flush=True)
    print("Model loading took 26.8 GiB memory and 3.6 seconds", flush=True)
    print("torch.compile took 11.3 s in total", flush=True)  # vLLM 0.26.0's words
    print("Available KV cache memory: 37.5 GiB", flush=True)
    print("GPU KV cache size: 1,234,567 tokens", flush=True)
    print("Graph capturing finished in 6 secs, took 0.5 GiB", flush=True)
    print("init engine (profile, create kv cache, warmup model) took 26.1 s (compilation: 11.3 s)",
          flush=True)
    time.sleep(0.3)
    publish()
    ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
