"""A real local HTTP server that records what it is sent: the Pushgateway and webhook endpoints the
nightly alerts reach in tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple


class Request(NamedTuple):
    method: str
    path: str
    body: bytes


@contextmanager
def recording_server() -> Iterator[tuple[str, list[Request]]]:
    """(base URL, the requests received so far), answering 200 to every PUT and POST."""
    received: list[Request] = []

    class Recorder(BaseHTTPRequestHandler):
        def _record(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            received.append(Request(self.command, self.path, body))
            self.send_response(200)
            self.end_headers()

        do_PUT = do_POST = _record  # noqa: N815 - http.server's handler names

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", received
    finally:
        httpd.shutdown()
        thread.join(10)
        httpd.server_close()
