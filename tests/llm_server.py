"""A real OpenAI-compatible HTTP server on loopback, serving recorded replies, for the LLM proposer's tests.

Each queued item is a reply (``{"content": ...}``), an error (``{"status": 500}``), a hang
(``{"hang": seconds}``) or a 200 with any body (``{"raw": b"..."}``); every request body is kept in ``requests``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeOpenAI:
    def __init__(self, replies=()):
        self.replies = list(replies)
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                server.requests.append(body)
                item = server.replies.pop(0) if server.replies else {"status": 500}
                if "hang" in item:
                    time.sleep(item["hang"])
                    item = {"status": 504}
                if "raw" in item:  # a 200 with this body as it is (no chat completion, or not JSON at all)
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(item["raw"])))
                    self.end_headers()
                    self.wfile.write(item["raw"])
                    return
                if "status" in item:
                    self.send_response(item["status"])
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(json.dumps({"error": {"message": "recorded failure", "type": "server_error"}})
                                     .encode())
                    return
                payload = {"id": "chatcmpl-recorded", "object": "chat.completion", "created": 0,
                           "model": body.get("model"), "choices": [{"index": 0, "finish_reason": "stop", "message": {
                               "role": "assistant", "content": item["content"]}}],
                           "usage": {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200}}
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def reply(source: str, hypothesis="larger blocks keep more loads in flight", name="bigger-blocks") -> dict:
    return {"content": json.dumps({"hypothesis": hypothesis, "prediction": {"forward": "5% faster"},
                                   "name": name, "source": source})}
