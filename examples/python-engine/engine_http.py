"""Plumbing shared by the emulated engines: a threaded JSON-over-HTTP server
on loopback that prints its address when ready and stops cleanly on SIGTERM
or SIGINT. Standard library only (plus eldr for the error types)."""

from __future__ import annotations

import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Optional, Tuple

MAX_BODY_BYTES = 64 * 1024

Reply = Tuple[int, Dict[str, Any]]
# A route: the parsed JSON body in, (HTTP status, JSON reply) out.
Route = Callable[[Dict[str, Any]], Reply]


class BadRequest(Exception):
    """The request body is not what the contract says: answered with 400."""


def require_str(body: Dict[str, Any], key: str, max_bytes: int) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"'{key}' must be a non-empty string")
    if len(value.encode()) > max_bytes or "\0" in value:
        raise BadRequest(f"'{key}' must be at most {max_bytes} bytes, without NUL")
    return value


def require_int(body: Dict[str, Any], key: str, low: int, high: int) -> int:
    value = body.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadRequest(f"'{key}' must be an integer in [{low}, {high}]")
    return value


def make_handler(posts: Dict[str, Route], gets: Dict[str, Callable[[], Reply]]) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: a gateway reuses connections

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            route = posts.get(self.path)
            if route is None:
                self._reply(404, {"error": f"no route POST {self.path}"})
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                length = -1
            if not 0 < length <= MAX_BODY_BYTES:
                self._reply(400, {"error": f"need a JSON body of 1..{MAX_BODY_BYTES} bytes"})
                self.close_connection = True
                return
            try:
                body = json.loads(self.rfile.read(length))
                if not isinstance(body, dict):
                    raise BadRequest("the body must be a JSON object")
                status, reply = route(body)
            except (BadRequest, json.JSONDecodeError, UnicodeDecodeError) as err:
                status, reply = 400, {"error": str(err)}
            self._reply(status, reply)

        def do_GET(self) -> None:  # noqa: N802
            route = gets.get(self.path)
            if route is None:
                self._reply(404, {"error": f"no route GET {self.path}"})
                return
            self._reply(*route())

        def _reply(self, status: int, reply: Dict[str, Any]) -> None:
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # one line per request would drown the test logs; errors go in replies

    return Handler


def serve(name: str, host: str, port: int, posts: Dict[str, Route],
          gets: Dict[str, Callable[[], Reply]], on_stop: Optional[Callable[[], None]] = None) -> None:
    """Serves until SIGTERM/SIGINT. Prints `READY <name> http://HOST:PORT` on
    stdout once listening (port 0 = any free port), so a supervisor can read
    the address."""
    server = ThreadingHTTPServer((host, port), make_handler(posts, gets))
    server.daemon_threads = True

    def stop(signum: int, frame: Any) -> None:
        # shutdown() waits for serve_forever to return: not from its own thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    bound_host, bound_port = server.server_address[:2]
    print(f"READY {name} http://{bound_host}:{bound_port}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
        if on_stop is not None:
            on_stop()
    print(f"{name}: stopped", file=sys.stderr, flush=True)
