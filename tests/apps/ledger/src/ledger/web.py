"""The ledger's web process, a WSGI app for gunicorn (`gunicorn ledger.web:app`): GET /health answers with the build
it runs. Declared with `listen`, gunicorn serves on the socket systemd hands it (LISTEN_FDS) and binds nothing."""

from __future__ import annotations

import json
import os
import socket


def app(environ, start_response):
    if environ.get("PATH_INFO") != "/health":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]
    body = json.dumps({"status": "ok", "build_id": os.environ.get("STURDY_BUILD_ID", ""),
                       "host": socket.gethostname(), "pid": os.getpid()}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
