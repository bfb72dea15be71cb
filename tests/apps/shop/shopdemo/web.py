"""The web process: GET /health answers with the build it runs."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from shopdemo.settings import BUILD_ID

STARTED = time.monotonic()
# For the tests of a readiness URL: /health answers 503 for the first SHOP_HEALTH_SLOW seconds, or always with
# SHOP_HEALTH_FAIL=1.
SLOW = float(os.environ.get("SHOP_HEALTH_SLOW") or 0)
FAIL = os.environ.get("SHOP_HEALTH_FAIL") == "1"


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        if self.path != "/health":
            self.send_error(404)
            return
        if FAIL or time.monotonic() - STARTED < SLOW:
            self.send_error(503, "not ready")
            return
        body = json.dumps({"status": "ok", "build_id": BUILD_ID}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        sys.stderr.write("web: " + fmt % args + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="shopdemo web process")
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    if os.environ.get("LISTEN_PID") == str(os.getpid()) and int(os.environ.get("LISTEN_FDS") or 0) >= 1:
        # Socket activation (sturdy_processes[].listen): systemd holds the listening socket and hands it over as
        # fd 3; it stays open across a restart, so no connection is refused.
        server = ThreadingHTTPServer(("", 0), Handler, bind_and_activate=False)
        server.socket.close()
        server.socket = socket.socket(fileno=3)
        args.bind, args.port = server.socket.getsockname()[:2]
    else:
        server = ThreadingHTTPServer((args.bind, args.port), Handler)
    # shutdown() waits for serve_forever() to return, and the handler runs on the thread serving: ask
    # from another thread, or SIGTERM deadlocks until systemd's stop timeout sends SIGKILL.
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"web: build {BUILD_ID} listening on {args.bind}:{args.port}", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
