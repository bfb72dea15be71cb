"""Stand-in worker: records how it was started, consumes nothing, and shuts down gracefully.

On SIGTERM it takes a moment to "finish the running task" and exits 0, as Celery's warm shutdown does.
"""
import json
import os
import signal
import sys
import tempfile
import time

stopping = False


def on_term(signum, frame):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, on_term)
state_dir = "/var/lib/" + os.environ.get("STURDY_APP", "unknown")


def writable(directory):
    try:
        with tempfile.NamedTemporaryFile(dir=directory):
            return True
    except OSError:
        return False


record = {
    "argv": sys.argv,
    "cwd": os.getcwd(),
    "pid": os.getpid(),
    # /opt/sturdy-test/data is world-writable on the host: only ProtectSystem=strict makes it read-only here.
    "writable": {d: writable(d) for d in (state_dir, "/tmp", "/opt/sturdy-test/data")},
    "env": {k: v for k, v in os.environ.items() if k.startswith(("STURDY_", "WORKER_"))},
}
name = f"{os.environ.get('STURDY_PROCESS', 'proc')}-{os.environ.get('STURDY_INSTANCE', '0')}.json"
with open(os.path.join(state_dir, name), "w", encoding="utf-8") as fh:
    json.dump(record, fh)
# With PrivateTmp= this file never shows in the host's /tmp.
with open(f"/tmp/sturdy-{name}", "w", encoding="utf-8") as fh:
    fh.write("private")
while not stopping:
    time.sleep(0.1)
time.sleep(1)
sys.exit(0)
