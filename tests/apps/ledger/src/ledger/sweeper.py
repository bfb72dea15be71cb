"""ledger-sweeper: a worker that is not Celery. It takes JSON jobs from the Redis list ledger:sweeps (and from its
own smoke list, STURDY_SMOKE_QUEUE in its unit) and answers each on the job's reply list. The deploy proves it
through ledger-sweeper-smoke (adapter: command). SIGTERM finishes the job in hand, then exits."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
import uuid

import redis

QUEUE = "ledger:sweeps"


def _broker() -> redis.Redis:
    return redis.Redis.from_url(os.environ.get("LEDGER_BROKER_URL", "redis://localhost:6379/5"))


def release() -> str | None:
    """The release this code was loaded from: the directory above it that holds RELEASE.json."""
    here = os.path.dirname(os.path.realpath(__file__))
    while here != os.path.dirname(here):
        if os.path.isfile(os.path.join(here, "RELEASE.json")):
            return here
        here = os.path.dirname(here)
    return None


def identity() -> dict:
    """Who answers: the smoke test compares build_id, host, unit, pid, release and the working directory with the
    unit's."""
    app, process, instance = (os.environ.get(k, "") for k in ("STURDY_APP", "STURDY_PROCESS", "STURDY_INSTANCE"))
    return {"build_id": os.environ.get("STURDY_BUILD_ID", ""), "host": socket.gethostname(),
            "unit": f"{app}-{process}@{instance}.service", "pid": os.getpid(), "release": release(),
            "cwd": os.getcwd(), "queues": [QUEUE]}


def work() -> int:
    """The worker's loop (console script ledger-sweeper)."""
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    broker = _broker()
    queues = [QUEUE] + [q for q in [os.environ.get("STURDY_SMOKE_QUEUE")] if q]
    print(f"ledger-sweeper {os.getpid()} takes jobs from {', '.join(queues)}", flush=True)
    while not stopping:
        item = broker.blpop(queues, timeout=1)
        if item is None:
            continue
        queue, raw = item[0].decode(), item[1]
        try:
            job = json.loads(raw)
        except ValueError:
            print(f"dropped a job on {queue} that is not JSON: {raw[:200]!r}", file=sys.stderr, flush=True)
            continue
        answer = identity() | {"queue": queue}
        if "account" in job:
            time.sleep(float(job.get("seconds", 0)))
            answer["account"] = job["account"]
        if job.get("reply"):
            broker.rpush(job["reply"], json.dumps(answer))
            broker.expire(job["reply"], 600)
    print("ledger-sweeper stopped on SIGTERM after its job in hand", flush=True)
    return 0


def ask(queue: str, job: dict, timeout: float) -> dict | None:
    """Put `job` on `queue` and wait for the worker's answer."""
    broker = _broker()
    job = job | {"reply": f"ledger:reply:{uuid.uuid4().hex}"}
    payload = json.dumps(job)
    broker.rpush(queue, payload)
    got = broker.blpop([job["reply"]], timeout=max(1, round(timeout)))
    if got is None:
        broker.lrem(queue, 0, payload)
        return None
    return json.loads(got[1])


def smoke() -> int:
    """The deploy's smoke command (ledger-sweeper-smoke): one job to $STURDY_SMOKE_QUEUE, the answer as JSON."""
    queue = os.environ.get("STURDY_SMOKE_QUEUE", QUEUE)
    timeout = float(os.environ.get("STURDY_SMOKE_TIMEOUT", "30"))
    answer = ask(queue, {"smoke": True}, timeout)
    if answer is None:
        print(f"no ledger-sweeper took the smoke job from {queue} within {timeout:g}s")
        return 1
    print(json.dumps(answer))
    return 0


def sweep(argv: list[str] | None = None) -> int:
    """ledger-sweep ACCOUNT [SECONDS]: one sweep job, the answer printed (a producer, as the web would be)."""
    args = argv if argv is not None else sys.argv[1:]
    answer = ask(QUEUE, {"account": args[0], "seconds": float(args[1]) if len(args) > 1 else 0}, 60)
    print(json.dumps(answer))
    return 0 if answer else 1
