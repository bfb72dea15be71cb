# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the deploy and operators run against RQ (python -m sturdy_agent rq-...): the smoke jobs, queue stats, job
states. The Redis URL is RQ_REDIS_URL, as `rq worker` reads it."""

from __future__ import annotations

import datetime
import time
import uuid

from .client import failed
from .core import RQ_URL, rq_url_from_credentials
from .names import RQ_SMOKE_JOB, SMOKE_PREFIX


def registered_workers(conn, queue: str) -> list[dict]:
    """The live RQ workers registered on `queue` (their registration hashes, newest first)."""
    from rq import worker_registration  # pylint: disable=import-outside-toplevel
    from rq.queue import Queue  # pylint: disable=import-outside-toplevel

    found = []
    for key in worker_registration.get_keys(Queue(queue, connection=conn)):
        fields = {_text(k): _text(v) for k, v in conn.hgetall(key).items()}
        if fields and "death" not in fields:
            found.append(dict(fields, name=_text(key).rsplit(":", 1)[-1]))
    return sorted(found, key=lambda w: w.get("birth", ""), reverse=True)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def registered_answer(token: str, worker: dict) -> dict:
    """A busy worker's answer, from the registration its main process wrote at its start (sturdy_build_id...): its horse
    runs a job that may take long, so the smoke job is not waited for."""
    started = float(worker.get("sturdy_job_started") or 0) or None
    busy = {"id": worker.get("sturdy_job"), "name": worker.get("sturdy_job_name"), "started": started,
            "running_for": round(time.time() - started, 1) if started else None}
    return {"token": token, "ran_in": "worker", "busy": [busy],
            "build_id": worker.get("sturdy_build_id") or None, "release": worker.get("sturdy_release") or None,
            "host": worker.get("hostname"), "unit": worker.get("sturdy_unit"), "pid": worker.get("sturdy_pid"),
            "queues": sorted(q for q in worker.get("queues", "").split(",") if q and not q.startswith(SMOKE_PREFIX)),
            "settings": {}}


def smoke(targets: list[str], timeout: float) -> list[dict]:
    """Send one smoke job to each queue through RQ and wait for all answers until the deadline (the same entries as
    client.smoke()). An instance whose horse is busy answers from its registration; a real queue that holds jobs gets no job
    (it would wait behind them): its proof is the workers registered on it, each with its build."""
    from redis import Redis  # pylint: disable=import-outside-toplevel
    from rq import Queue  # pylint: disable=import-outside-toplevel
    from rq.serializers import resolve_serializer  # pylint: disable=import-outside-toplevel

    url = rq_url_from_credentials()
    if not url:
        raise SystemExit(f"sturdy_agent: {RQ_URL} is not set: `rq worker` and the smoke client read the Redis URL from "
                         f"it. Put {RQ_URL} in the app's sturdy_secrets")
    conn = Redis.from_url(url)
    found, sent = {}, []
    for name in targets:
        started = time.monotonic()
        try:
            workers = registered_workers(conn, name)
            serializer = next((w["sturdy_serializer"] for w in workers if w.get("sturdy_serializer")), None)
            queue = Queue(name, connection=conn, serializer=resolve_serializer(serializer))
            depth = 0 if name.startswith(SMOKE_PREFIX) else queue.count
            if depth:
                consumers = [{"node": w.get("name"), "build_id": w.get("sturdy_build_id"), "host": w.get("hostname"),
                              "unit": w.get("sturdy_unit")} for w in workers]
                found[name] = {"queue": name, "backlog": depth, "consumers": consumers, "ok": bool(consumers),
                               "latency": round(time.monotonic() - started, 3)}
                continue
            token = uuid.uuid4().hex
            # ttl: a job nobody took in time is dropped instead of answering a later deploy.
            job = queue.enqueue(RQ_SMOKE_JOB, token, ttl=max(1, int(timeout)), result_ttl=600, failure_ttl=600,
                                job_timeout=max(30, int(timeout)))
        except Exception as exc:  # pylint: disable=broad-exception-caught  # reported per queue
            found[name] = {"queue": name, **failed(exc)}
            continue
        sent.append((name, token, started, job, queue))
    deadline = time.monotonic() + timeout
    while sent:
        waiting_still = []
        for name, token, started, job, queue in sent:
            entry = {"queue": name, "token": token}
            try:
                status = job.get_status(refresh=True)
                status = _text(getattr(status, "value", status) or "")
                if status == "finished":
                    got = job.return_value(refresh=True) or {}
                    found[name] = dict(entry, ok=got.get("token") == token, answer=got,
                                       latency=round(time.monotonic() - started, 3))
                    continue
                if status in ("failed", "stopped", "canceled"):
                    result = job.latest_result()
                    why = (getattr(result, "exc_string", None) or status).strip().splitlines()[-1]
                    found[name] = dict(entry, ok=False, error=f"the smoke job {status}: {why}")
                    continue
                busy = [w for w in registered_workers(conn, name) if w.get("sturdy_job") not in (None, "", job.id)]
                if name.startswith(SMOKE_PREFIX) and status == "queued" and busy \
                        and time.monotonic() - started > 0.5:
                    queue.remove(job.id)
                    job.delete()
                    found[name] = dict(entry, ok=True, answer=registered_answer(token, busy[0]),
                                       latency=round(time.monotonic() - started, 3))
                    continue
            except Exception as exc:  # pylint: disable=broad-exception-caught  # reported per queue
                found[name] = dict(entry, **failed(exc))
                continue
            if time.monotonic() >= deadline:
                try:
                    queue.remove(job.id)
                    job.delete()
                except Exception:  # pylint: disable=broad-exception-caught  # the ttl drops it anyway
                    pass
                found[name] = dict(entry, ok=False, error=f"TimeoutError: no worker answered within {timeout:g}s")
                continue
            waiting_still.append((name, token, started, job, queue))
        sent = waiting_still
        if sent:
            time.sleep(0.1)
    return [found[queue] for queue in targets if queue in found]


def queue_stats(queues: list[str]) -> list[dict]:
    """Depth, oldest waiting job (RQ pushes to the tail and pops the head), live workers and failed jobs of each queue."""
    from redis import Redis  # pylint: disable=import-outside-toplevel
    from rq import Queue  # pylint: disable=import-outside-toplevel
    from rq.registry import FailedJobRegistry  # pylint: disable=import-outside-toplevel

    conn = Redis.from_url(rq_url_from_credentials() or "")
    found = []
    for name in queues:
        entry = {"queue": name, "depth": 0, "oldest_task": None, "oldest_age": None, "dead_letter_depth": None}
        try:
            queue = Queue(name, connection=conn)
            entry["depth"] = queue.count
            first = conn.lindex(queue.key, 0) if entry["depth"] else None
            if first:
                job = conn.hmget(f"rq:job:{_text(first)}", "enqueued_at", "description")
                if job[0]:
                    enqueued = datetime.datetime.fromisoformat(_text(job[0]).replace("Z", "+00:00"))
                    entry["oldest_age"] = round(time.time() - enqueued.timestamp(), 1)
                entry["oldest_task"] = _text(job[1]).split("(", 1)[0] if job[1] else None
            entry["consumers"] = sorted(w["name"] for w in registered_workers(conn, name))
            entry["failed_jobs"] = FailedJobRegistry(name, connection=conn).count
        except Exception as exc:  # pylint: disable=broad-exception-caught  # reported per queue
            entry["error"] = f"{type(exc).__name__}: {exc}"
        found.append(entry)
    return found


def job_states(ids: list[str]) -> list[dict]:
    """Each RQ job's status (queued, started, finished, failed...; None once RQ forgot it) and its queue."""
    from redis import Redis  # pylint: disable=import-outside-toplevel

    conn = Redis.from_url(rq_url_from_credentials() or "")
    found = []
    for job_id in ids:
        try:
            status, origin = conn.hmget(f"rq:job:{job_id}", "status", "origin")
            found.append({"id": job_id, "rq_status": _text(status) if status else None,
                          "queue": _text(origin) if origin else None})
        except Exception as exc:  # pylint: disable=broad-exception-caught  # reported per job
            found.append({"id": job_id, "error": f"{type(exc).__name__}: {exc}"})
    return found
