"""An HTTP server process that plays a vLLM engine for hindsight's gateway tests: it
answers POST /v1/completions in vLLM's response shape (vllm/entrypoints/openai
serving_completion.py: choices[].text, logprobs {text_offset, token_logprobs,
tokens as "token_id:<id>" with return_tokens_as_token_ids, top_logprobs},
finish_reason, stop_reason, prompt_token_ids and token_ids with return_token_ids,
usage) and GET /v1/models. It is not vLLM: it samples nothing, it makes up a reply
from the prompt (the bytes of "reply <prompt length>", then the first stop token
id), with made-up log-probs, so the test knows what the engine sampled. Every
request body is appended to LOG as one JSON line. With "stream": true it answers
with server-sent events, a chunk per token, as vLLM's completion_stream_generator
does. With --old it leaves token_ids out (vLLM before 0.10.2): the ids are only in
logprobs.tokens. POST /v1/load_lora_adapter {"lora_name", "lora_path"} (vLLM's
runtime LoRA loading) adds a model id that completions then accept beside
served-policy, as vLLM serves an adapter by its name.

usage: fake_vllm.py PORT_FILE LOG [--old]
"""

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port_file, log_path = sys.argv[1], sys.argv[2]
old = "--old" in sys.argv[3:]
adapters = {}  # lora_name -> lora_path, loaded by POST /v1/load_lora_adapter


class Engine(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body):
        b = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def stream(self, req, ids, lps, finish, stop_reason):
        """Server-sent events as vLLM's completion_stream_generator writes them: a
        chunk per token (the delta's text, logprobs and, with return_token_ids,
        token_ids; prompt_token_ids on the first), the finish reason on the last,
        then [DONE]."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i, (t, lp) in enumerate(zip(ids, lps)):
            tok = f"token_id:{t}"
            last = i == len(ids) - 1
            choice = {"index": 0, "text": bytes([t]).decode("utf-8", "replace") if t < 256 else "",
                      "logprobs": {"text_offset": [i], "token_logprobs": [lp], "tokens": [tok], "top_logprobs": [{tok: lp}]},
                      "finish_reason": finish if last else None, "stop_reason": stop_reason if last else None}
            if not old:
                choice["token_ids"] = [t]
                if i == 0:
                    choice["prompt_token_ids"] = req["prompt"]
            chunk = {"id": "cmpl-s", "object": "text_completion", "created": int(time.time()), "model": req["model"],
                     "choices": [choice]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def do_GET(self):
        if self.path == "/v1/models":
            self.answer(200, {"object": "list", "data": [{"id": "served-policy", "object": "model", "owned_by": "vllm"}]})
        else:
            self.answer(404, {"error": {"message": "not found", "type": "NotFoundError", "code": 404}})

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with open(log_path, "a") as f:
            f.write(json.dumps(req) + "\n")
        if self.path == "/v1/load_lora_adapter":
            if not req.get("lora_name") or not os.path.isdir(req.get("lora_path", "")):
                self.answer(400, {"error": {"message": "lora_name and an existing lora_path wanted", "type": "BadRequestError", "code": 400}})
                return
            adapters[req["lora_name"]] = req["lora_path"]
            self.answer(200, {"message": f"Success: LoRA adapter '{req['lora_name']}' added successfully."})
            return
        if self.path != "/v1/completions":
            self.answer(404, {"error": {"message": "not found", "type": "NotFoundError", "code": 404}})
            return
        if req.get("model") != "served-policy" and req.get("model") not in adapters:
            self.answer(404, {"error": {"message": f"The model `{req.get('model')}` does not exist.",
                                        "type": "NotFoundError", "param": None, "code": 404}})
            return
        prompt = req["prompt"]
        if not isinstance(prompt, list) or not all(isinstance(t, int) for t in prompt):
            self.answer(400, {"error": {"message": "prompt: want token ids", "type": "BadRequestError", "code": 400}})
            return
        ids = list(f"reply {len(prompt)}".encode())
        finish, stop_reason = "length", None
        stops = req.get("stop_token_ids") or []
        if len(ids) < req["max_tokens"] and stops:
            ids.append(stops[0])
            finish, stop_reason = "stop", stops[0]
        ids = ids[: req["max_tokens"]]
        lps = [-0.125 * (1 + i % 5) for i in range(len(ids))]
        tokens = [f"token_id:{t}" for t in ids]
        offsets, at = [], 0
        for t in tokens:
            offsets.append(at)
            at += len(t)
        text = bytes(t for t in ids if t < 256).decode("utf-8", "replace")
        choice = {
            "index": 0, "text": text,
            "logprobs": {"text_offset": offsets, "token_logprobs": lps, "tokens": tokens,
                         "top_logprobs": [{tok: lp} for tok, lp in zip(tokens, lps)]},
            "finish_reason": finish, "stop_reason": stop_reason, "prompt_logprobs": None,
        }
        if req.get("stream"):
            self.stream(req, ids, lps, finish, stop_reason)
            return
        if not old:
            choice["prompt_token_ids"] = prompt
            choice["token_ids"] = ids
        self.answer(200, {
            "id": f"cmpl-{len(prompt)}", "object": "text_completion", "created": int(time.time()),
            "model": req["model"], "choices": [choice],
            "usage": {"prompt_tokens": len(prompt), "total_tokens": len(prompt) + len(ids),
                      "completion_tokens": len(ids), "prompt_tokens_details": None},
            "system_fingerprint": None, "kv_transfer_params": None,
        })


srv = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
with open(port_file + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(port_file + ".tmp", port_file)
srv.serve_forever()
