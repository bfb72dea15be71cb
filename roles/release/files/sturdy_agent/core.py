# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every side of the agent shares: systemd notification, the instance's smoke queue, the build the code was loaded
from, and the state of this process's hooks. Standard library only (kombu is imported when own_queue() is called)."""

from __future__ import annotations

import json
import os
import socket
import time

from .names import PAUSED, RELEASE_FILE, SMOKE_PREFIX

# Where `rq worker` (and the smoke client) read the Redis URL.
RQ_URL = "RQ_REDIS_URL"
# What the hooks of this process know: its main PID, node, pool, gate, watchdog timer...
STATE: dict = {}


def notify(message: str) -> bool:
    """Send one datagram to systemd's notification socket; False when not running under Type=notify."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        sock.connect(address)
        sock.sendall(message.encode())
    return True


def smoke_queue(app: str, process: str, instance: str, host: str | None = None) -> str:
    """The queue only one instance consumes: sturdy.smoke.<app>-<process>@<instance>.<host>."""
    return f"{SMOKE_PREFIX}{app}-{process}@{instance}.{host or socket.gethostname()}"


def own_queue(name: str):
    """A queue of the agent's own (an instance's smoke queue, a dead-letter queue) as every side declares it: plain,
    durable, on the default exchange, whatever type the app gives its queues (RabbitMQ refuses a queue declared twice
    with different arguments)."""
    from kombu import Queue  # pylint: disable=import-outside-toplevel

    return Queue(name, routing_key=name)


def own_smoke_queue(environ=None) -> str | None:
    environ = os.environ if environ is None else environ
    names = [environ.get(k) for k in ("STURDY_APP", "STURDY_PROCESS", "STURDY_INSTANCE")]
    return smoke_queue(*names) if all(names) else None


def release_dir_of(path: str) -> str | None:
    """The release directory holding `path` (the one with RELEASE.json), or None."""
    here = os.path.dirname(os.path.realpath(path))
    while here != os.path.dirname(here):
        if os.path.isfile(os.path.join(here, RELEASE_FILE)):
            return here
        here = os.path.dirname(here)
    return None


def loaded_build() -> tuple[str | None, str | None]:
    """(release path, build ID) of the release this code was loaded from: what the process really runs."""
    release = release_dir_of(__file__)
    if release is None:
        return None, None
    try:
        with open(os.path.join(release, RELEASE_FILE), encoding="utf-8") as fh:
            return release, json.load(fh).get("build_id")
    except (OSError, ValueError):
        return release, None


def identity(token: str, ran_in: str, busy: list, consumed: list[str], pid: int) -> dict:
    """Who answers a smoke job: the build of the release its code was loaded from, where it runs, what it consumes."""
    release, build_id = loaded_build()
    return {
        "token": token,
        "ran_in": ran_in,
        "busy": busy,
        "build_id": build_id,
        "release": release,
        "cwd": os.path.realpath(os.getcwd()),
        "env_build_id": os.environ.get("STURDY_BUILD_ID"),
        "host": socket.gethostname(),
        "unit": unit_name(),
        "pid": pid,
        "queues": sorted(q for q in consumed if not q.startswith(SMOKE_PREFIX)),
    }


def reply_url(broker_url: str) -> str:
    """The result backend a smoke answer travels through when the app has none (many apps send tasks and never read
    a result): the broker's own Redis database on Redis, a reply queue of the sender's (rpc://) on any other broker."""
    scheme = broker_url.partition("://")[0].lower()
    return broker_url if scheme in ("redis", "rediss", "redis+socket") else "rpc://"


def unit_name() -> str:
    return "{}-{}@{}.service".format(*(os.environ.get(k, "?") for k in ("STURDY_APP", "STURDY_PROCESS", "STURDY_INSTANCE")))


def rq_url_from_credentials(environ=None) -> str | None:
    """RQ_REDIS_URL as `rq worker` reads it from the environment; delivered as a systemd credential, it is read from
    $CREDENTIALS_DIRECTORY into the environment first (RQ reads no files)."""
    environ = os.environ if environ is None else environ
    if not environ.get(RQ_URL) and environ.get("CREDENTIALS_DIRECTORY"):
        try:
            with open(os.path.join(environ["CREDENTIALS_DIRECTORY"], RQ_URL), encoding="utf-8") as fh:
                environ[RQ_URL] = fh.read().strip()
        except OSError:
            pass
    return environ.get(RQ_URL)


def dump_stacks_when_killed() -> None:
    """Python's faulthandler for the worker (and the processes it forks): the SIGABRT of a watchdog timeout, and a
    crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL), write every thread's stack to stderr, the unit's journal, before the
    process dies: where a worker that stopped feeding its watchdog was stuck, which `diagnose` then shows."""
    import faulthandler  # pylint: disable=import-outside-toplevel

    if not faulthandler.is_enabled():
        faulthandler.enable(all_threads=True)


def pause_file() -> str | None:
    """The app's pause marker: beside the releases, two levels above the release this code was loaded from."""
    if "pause_file" not in STATE:
        release = release_dir_of(__file__)
        STATE["pause_file"] = os.path.join(os.path.dirname(os.path.dirname(release)), PAUSED) if release else None
    return STATE["pause_file"]


def paused_here(now: float | None = None, path: str | None = None, process: str | None = None) -> dict | None:
    """The pause marker's content while it pauses this process type (it names none, or this one), else None. Read at
    most once a second. A marker that cannot be read as JSON still pauses: someone meant to stop the consumption."""
    now = time.monotonic() if now is None else now
    seen = STATE.get("pause_seen")
    if seen is not None and now - seen[0] < 1.0:
        return seen[1]
    path = pause_file() if path is None else path
    held = None
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                held = json.load(fh)
        except FileNotFoundError:
            held = None
        except (OSError, ValueError):
            held = {"owner": "?", "message": f"{path} cannot be read as JSON"}
    if isinstance(held, dict):
        names = held.get("processes") or []
        if names and (process or os.environ.get("STURDY_PROCESS")) not in names:
            held = None
    elif held is not None:
        held = {"owner": "?", "message": f"{path} holds no JSON object"}
    STATE["pause_seen"] = (now, held)
    return held


def paused_status(held: dict, queues: list[str]) -> str:
    """systemd's STATUS= line of a paused worker: `systemctl status` and the pause playbook read it."""
    return (f"paused by {held.get('owner') or '?'} since {held.get('started') or '?'}: taking no message from "
            f"{', '.join(queues) or 'its queues'} (its smoke queue stays consumed)")
