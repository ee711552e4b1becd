"""A tiny real HTTP server that answers as a vLLM server does on the routes the rollout engine and a weight push use
(``/health``, ``/v1/completions`` with token ids, ``/pause``, ``/collective_rpc`` reload, ``/reset_prefix_cache``,
``/resume``), so routing, exclusion and pushes over several servers are tested without vLLM.

A completion's ids say who sampled it: ``[tag, 50 + reloads, stop]`` (the server's tag, how many reloads it has
done, the request's first stop id). ``hold`` keeps completions in flight until set; ``fail_reload`` answers the reload with HTTP 500; ``kill``
stops listening (connections are refused from then on). Run as a script (``fake_vllm.py -m vllm... --port P
--model DIR ...``, the launcher's argv) it serves in the foreground, prints its ``CUDA_VISIBLE_DEVICES`` and tags
its completions with 10 + its first GPU.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STOP = 9


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # the default 5 resets connections when dozens of requests arrive at once
    daemon_threads = True


class FakeVllm:
    """One fake server on 127.0.0.1 (a free port unless given), serving from a daemon thread once `start`ed."""

    def __init__(self, tag: int, port: int = 0) -> None:
        self.tag = tag
        self.reloads = 0
        self.calls: list[str] = []  # the admin routes called, in order
        self.prompts: list[list[int]] = []  # the completion prompts received (probes excluded)
        self.hold = threading.Event()
        self.hold.set()
        self.fail_reload = False
        self.server = _Server(("127.0.0.1", port), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread: threading.Thread | None = None

    def start(self) -> FakeVllm:
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def kill(self) -> None:
        """Stop listening: new connections are refused (a held request's connection is closed when released)."""
        self.server.shutdown()
        self.server.server_close()

    def answer(self, path: str, body: dict) -> tuple[int, dict]:
        if path == "/v1/completions":
            if body.get("logprobs") == 5:  # the logprobs-mode probe: processed (follows the temperature)
                scale = 1.0 / body["temperature"]
                return 200, {"choices": [{"logprobs": {"top_logprobs": [{"token_id:1": -0.1 * scale}]}}]}
            self.prompts.append(body["prompt"])
            self.hold.wait()
            stops = body.get("stop_token_ids") or []
            ids = [self.tag, 50 + self.reloads, *stops[:1]][: body["max_tokens"]]
            choice = {
                "token_ids": ids,
                "prompt_token_ids": body["prompt"],
                "logprobs": {"token_logprobs": [-0.1] * len(ids)},
                "finish_reason": "stop" if ids[-1] in stops else "length",
            }
            return 200, {"choices": [choice]}
        self.calls.append(path)
        if path == "/collective_rpc":
            if self.fail_reload:
                return 500, {"error": "reload failed"}
            self.reloads += 1
        return 200, {}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._send(200 if self.path == "/health" else 404, {})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else {}
                self._send(*fake.answer(self.path.split("?")[0], body))

            def _send(self, status: int, reply: dict) -> None:
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


def main(argv: list[str]) -> None:
    """The launcher's argv (``-m vllm.entrypoints.openai.api_server --model DIR ... --port P ...``): serve there."""
    port = int(argv[argv.index("--port") + 1])
    devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    print(f"CUDA_VISIBLE_DEVICES={devices}", flush=True)
    # the tag names the replica: from its first pinned GPU (distinct per replica), else from the port (two ports
    # may share a tag then: tests that tell replicas apart pin them)
    tag = 10 + int(devices.split(",")[0]) if devices else port % 40 + 10
    fake = FakeVllm(tag=tag, port=port)
    fake.server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
