"""The OpenAI embedder's own retries (issue 35, item 5): what a server that answers asks for is honoured (a
rate limit or a 5xx is tried again after its ``Retry-After``), what it refuses is not retried, and an answer
comes back as before. Against a real HTTP server on localhost speaking the embeddings API."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pgmem.errors import EmbeddingError

pytest.importorskip("openai")

from pgmem.embeddings import OpenAIEmbedder  # noqa: E402 - after the skip

API_KEY = "sk-test-S3cretApiKey0123456789"


class _Server(ThreadingHTTPServer):
    #: The statuses of the next answers (then 200s), and the requests seen.
    script: list[tuple[int, dict[str, str]]]
    seen: int = 0


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen += 1
        status, headers = self.server.script.pop(0) if self.server.script else (200, {})
        if status == 200:
            data = [
                {"object": "embedding", "index": i, "embedding": [1.0] + [0.0] * 7} for i in range(len(body["input"]))
            ]
            payload = {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
        else:
            payload = {"error": {"message": f"status {status}", "type": "test", "code": None}}
        raw = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.script = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def _embedder(server: _Server) -> OpenAIEmbedder:
    return OpenAIEmbedder(
        "test-embedding", 8, api_key=API_KEY, base_url=f"http://127.0.0.1:{server.server_address[1]}/v1"
    )


def test_answers_come_back_as_vectors(server: _Server) -> None:
    vectors = _embedder(server).embed(["a", "b", "c"])
    assert vectors.shape == (3, 8) and server.seen == 1


def test_a_rate_limit_and_a_server_error_are_retried_after_retry_after(server: _Server) -> None:
    server.script = [(429, {"Retry-After": "0.05"}), (503, {"retry-after-ms": "50"})]
    assert _embedder(server).embed(["a"]).shape == (1, 8)
    assert server.seen == 3


async def test_the_async_twin_retries_too(server: _Server) -> None:
    server.script = [(500, {"Retry-After": "0.05"})]
    assert (await _embedder(server).aembed(["a", "b"])).shape == (2, 8)
    assert server.seen == 2


def test_a_refusal_is_not_retried(server: _Server) -> None:
    server.script = [(400, {}), (200, {})]
    with pytest.raises(EmbeddingError, match="status 400"):
        _embedder(server).embed(["a"])
    assert server.seen == 1


def test_a_refused_key_says_to_check_it(server: _Server) -> None:
    server.script = [(401, {})]
    with pytest.raises(EmbeddingError, match="OPENAI_API_KEY") as raised:
        _embedder(server).embed(["a"])
    assert "S3cretApiKey" not in str(raised.value) and server.seen == 1


def test_retries_stop_at_max_retries(server: _Server) -> None:
    server.script = [(503, {"Retry-After": "0.01"})] * 4
    embedder = OpenAIEmbedder(
        "test-embedding", 8, api_key=API_KEY, base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", max_retries=2
    )
    with pytest.raises(EmbeddingError, match="status 503"):
        embedder.embed(["a"])
    assert server.seen == 3


def test_a_wrong_path_or_model_says_what_to_check(server: _Server) -> None:
    server.script = [(404, {})]
    with pytest.raises(EmbeddingError, match="answered 404") as raised:
        _embedder(server).embed(["a"])
    assert "OPENAI_BASE_URL" in str(raised.value) and f":{server.server_address[1]}/v1" in str(raised.value)
    assert server.seen == 1
