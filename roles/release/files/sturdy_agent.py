# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""sturdy.workers worker agent: what a framework's worker lacks under systemd, without changing the app's code.

Installed by the sturdy.workers.release role into every release's venv (site-packages/sturdy_agent.py plus
sturdy_agent.pth, which imports it at interpreter start). It does nothing unless the unit sets
STURDY_AGENT=celery; then, inside a Celery worker:

- READY=1 to systemd once the worker consumes (Type=notify: `systemctl restart` returns when it is ready),
  STOPPING=1 on warm shutdown, WATCHDOG=1 from the worker's own event loop when the unit sets WatchdogSec=, and
  every thread's stack in the journal when a watchdog timeout (SIGABRT) or a crash kills it (faulthandler);
- a per-instance smoke queue (smoke_queue()) and a task `sturdy.smoke` that answers with the build of the
  release the code was loaded from, the host, unit, main PID, release path, the queues the worker consumes
  and its reliability settings. The smoke queue has a consumer and channel of its own (SmokeConsumer), so a smoke
  job never waits behind the app's backlog or prefetched tasks: it runs in the pool when a slot is free, and when
  every slot is busy the worker's main process answers at once, naming the tasks that occupy them. The answer goes
  through the app's result backend, or, for an app that has none, through one on the broker that only the smoke
  task uses (reply_backend());

- a record of each task while it runs ($STATE_DIRECTORY/sturdy-tasks/<unit>/<pid>.json: id, name, start, the
  unit's invocation), left behind when the worker is killed, so a diagnosis can tell what it was running;
- a count of finished tasks by build and outcome ($STATE_DIRECTORY/sturdy-counts/<unit>.json: succeeded, failed,
  retried), read by the metrics collector;
- a stamp (header sturdy_sent, a UNIX time) on every task message the process publishes, so the age of the
  oldest waiting message can be told.

- a remote-control query `sturdy_health` every worker answers with its build, release, queues and running tasks;
- a gate before the pool (Gate): a message whose workers kept dying (more than STURDY_MAX_DELIVERIES deliveries), a
  message whose arguments the task cannot take and a message for a task the build does not register go to the
  queue's dead-letter queue sturdy.dead.<queue> with the reason, instead of looping, failing or being dropped; with
  STURDY_RATE_LIMIT, tasks start at most at that rate.

With STURDY_AGENT=rq, inside an RQ worker (RQ 2, `rq worker` or your own script around rq.Worker): the instance's
smoke queue first among its queues and a job `sturdy_agent.rq_smoke` answering like `sturdy.smoke`; its build,
release, unit and main PID in its registration hash in Redis (what the smoke client answers for an instance whose
work horse is busy with a long job); READY=1 once it listens (its warm-shutdown handler installed), STOPPING=1 on
SIGTERM (RQ's warm shutdown: the running job finishes first, and so does a job taken as the stop comes; an idle
instance pops for at most RQ_POP_SECONDS, so it notices the stop that soon); the same task records and counts.
RQ_REDIS_URL delivered as a systemd credential is read into the environment, where `rq worker` reads it.

`python -m sturdy_agent smoke ...` (Celery) and `rq-smoke ...` (RQ) are the producer side of the smoke test, `python -m sturdy_agent stats ...` reads
the queues (depth, oldest message, consumers), `python -m sturdy_agent health ...` asks every worker,
`python -m sturdy_agent dead list|requeue|discard ...` handles dead letters, `names` tells the task names a build
registers and those waiting in the queues; see main(). Standard library only, except the Celery
hooks, which import Celery from the worker's own venv.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import inspect
import json
import os
import socket
import sys
import time
import types
import uuid

SMOKE_TASK = "sturdy.smoke"
# RQ's smoke job: a function the work horse imports by name, like any job's.
RQ_SMOKE_JOB = "sturdy_agent.rq_smoke"
# Where `rq worker` (and the smoke client) read the Redis URL.
RQ_URL = "RQ_REDIS_URL"
# The longest blocking pop of an RQ worker: how long a stop waits for an idle worker to notice it.
RQ_POP_SECONDS = 1
SMOKE_PREFIX = "sturdy.smoke."
SENT_HEADER = "sturdy_sent"
RELEASE_FILE = "RELEASE.json"
_STATE: dict = {}


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


TASK_RECORDS = "sturdy-tasks"
# Records of tasks a killed worker left behind are kept this long for a diagnosis, then removed at a start.
TASK_RECORDS_KEEP = 7 * 86400


def task_record_path(environ=None, pid: int | None = None) -> str | None:
    """Where this process records the task it runs: $STATE_DIRECTORY/sturdy-tasks/<unit>/<pid>.json."""
    environ = os.environ if environ is None else environ
    base = (environ.get("STATE_DIRECTORY") or "").split(":")[0]
    names = [environ.get(k) for k in ("STURDY_APP", "STURDY_PROCESS", "STURDY_INSTANCE")]
    if not base or not all(names):
        return None
    return os.path.join(base, TASK_RECORDS, "{}-{}@{}.service".format(*names), f"{pid or os.getpid()}.json")


def prune_task_records(directory: str, now: float, keep: float = TASK_RECORDS_KEEP) -> None:
    """Remove records older than `keep` (the newest ones tell what a recent death interrupted)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        path = os.path.join(directory, name)
        try:
            if now - os.stat(path).st_mtime > keep:
                os.unlink(path)
        except OSError:
            pass


TASK_COUNTS = "sturdy-counts"
COUNTED = {"task_success": "succeeded", "task_failure": "failed", "task_retry": "retried"}


def task_counts_path(environ=None) -> str | None:
    """Where this unit's processes count finished tasks: $STATE_DIRECTORY/sturdy-counts/<unit>.json."""
    environ = os.environ if environ is None else environ
    base = (environ.get("STATE_DIRECTORY") or "").split(":")[0]
    names = [environ.get(k) for k in ("STURDY_APP", "STURDY_PROCESS", "STURDY_INSTANCE")]
    if not base or not all(names):
        return None
    return os.path.join(base, TASK_COUNTS, "{}-{}@{}.service.json".format(*names))


def count_task(path: str, build: str, outcome: str, keep=None) -> None:
    """Add one to {build: {outcome: n}} in the unit's count file. The pool's processes share it: a lock file orders
    them, and the file is replaced whole (a reader, or a process killed mid-write, never sees half of it). Builds
    for which `keep(build)` is false (their release was pruned) are dropped. The file outlives restarts, so the
    metric is a counter per unit."""
    import fcntl  # pylint: disable=import-outside-toplevel

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(f"{path}.lock", "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path, encoding="utf-8") as fh:
                counts = json.load(fh)
        except FileNotFoundError:
            counts = {}
        except (OSError, ValueError):
            # Kept aside for a look, not silently zeroed in place.
            os.replace(path, f"{path}.bad")
            counts = {}
        if not isinstance(counts, dict):
            counts = {}
        if keep is not None:
            counts = {b: c for b, c in counts.items() if b == build or keep(b)}
        by_outcome = counts.setdefault(build, {})
        by_outcome[outcome] = by_outcome.get(outcome, 0) + 1
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(counts, fh, sort_keys=True)
        os.replace(tmp, path)


def record_task_start(task_id, name) -> None:
    """The task this process starts, for a diagnosis of its death (task_record_path)."""
    path = task_record_path()
    if path:
        record = {"id": task_id, "name": name, "started": time.time(), "pid": os.getpid(),
                  "invocation": os.environ.get("INVOCATION_ID")}
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                json.dump(record, fh)
        except OSError:
            pass


def close_task_records(directory: str, end: str, now: float, invocation=None, task_id=None, alive=None) -> list:
    """Mark as ended, with `end` saying how, the open records in `directory` of this invocation whose process is
    gone (a pool process killed mid-task: the pool has replaced it), or that name `task_id` (its message was
    dead-lettered). A record so closed tells a diagnosis it was not running when the unit later died. Returns the
    ids of the tasks closed."""
    alive = alive or _pid_alive
    closed = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return closed
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(directory, name)
        try:
            with open(path, encoding="utf-8") as fh:
                record = json.load(fh)
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("ended"):
            continue
        if invocation and record.get("invocation") not in (None, invocation):
            continue
        if task_id is not None and record.get("id") != task_id:
            continue
        if task_id is None and alive(record.get("pid")):
            continue
        record.update(ended=now, end=end)
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(record, fh)
            os.replace(tmp, path)
        except OSError:
            continue
        closed.append(record.get("id"))
    return closed


def _pid_alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def close_dead_children_records() -> None:
    """In a pool process the pool has just started: the records its dead predecessors left open are closed."""
    path = task_record_path()
    if path:
        close_task_records(os.path.dirname(path), "its pool process died running it, and the pool replaced it",
                           time.time(), invocation=os.environ.get("INVOCATION_ID"))


def record_task_end() -> None:
    path = task_record_path()
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass


def count_outcome(name, outcome: str) -> None:
    """One finished task of this build (count_task), the smoke job aside."""
    path = task_counts_path()
    if not path or name in (SMOKE_TASK, RQ_SMOKE_JOB):
        return
    if "build" not in _STATE:
        release, _STATE["build"] = loaded_build()
        _STATE["build"] = _STATE["build"] or "unknown"
        _STATE["releases"] = os.path.dirname(release) if release else None
    releases = _STATE["releases"]
    try:
        count_task(path, _STATE["build"], outcome,
                   (lambda b: os.path.isdir(os.path.join(releases, b))) if releases else None)
    except OSError:
        pass


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


def answer(token: str, conf, consumed: list[str], ran_in: str = "pool", busy: list | None = None) -> dict:
    """What the smoke job answers: from the pool (ran_in "pool"), or from the worker's main process while every pool
    slot is busy (ran_in "worker", busy: the tasks occupying the slots)."""
    options = conf.broker_transport_options or {}
    return {
        **identity(token, ran_in, busy or [], consumed, _STATE.get("main_pid", os.getpid())),
        "settings": {
            "acks_late": bool(conf.task_acks_late),
            "reject_on_worker_lost": bool(conf.task_reject_on_worker_lost),
            "prefetch_multiplier": conf.worker_prefetch_multiplier,
            "concurrency": _STATE.get("concurrency"),
            "pool": _STATE.get("pool"),
            "max_tasks_per_child": _STATE.get("max_tasks_per_child"),
            "max_memory_per_child": _STATE.get("max_memory_per_child"),
            "task_time_limit": conf.task_time_limit,
            "task_soft_time_limit": conf.task_soft_time_limit,
            "visibility_timeout": options.get("visibility_timeout"),
        },
    }


def pool_name(pool) -> str | None:
    """The worker's pool as Celery names it (prefork, solo, threads' "thread", gevent...): the class the command line
    gave, or the name or "module:Class" of worker_pool."""
    module = pool.split(":", 1)[0] if isinstance(pool, str) else getattr(pool, "__module__", "")
    return module.rsplit(".", 1)[-1] or None


def health(queues: list[str], tasks: list[dict]) -> dict:
    """The answer to the sturdy_health remote-control query: what this worker runs and is doing."""
    release, build_id = loaded_build()
    return {
        "build_id": build_id,
        "release": release,
        "host": socket.gethostname(),
        "unit": unit_name(),
        "pid": _STATE.get("main_pid", os.getpid()),
        "queues": sorted(q for q in queues if not q.startswith(SMOKE_PREFIX)),
        "tasks": tasks,
    }


def register_health() -> None:
    """The sturdy_health remote-control query, registered in the worker once it is set up (not at interpreter
    start: a pool that patches the standard library must come first)."""
    from celery.worker import state as worker_state  # pylint: disable=import-outside-toplevel
    from celery.worker.control import inspect_command  # pylint: disable=import-outside-toplevel

    @inspect_command(name="sturdy_health")
    def sturdy_health(state, **_):
        consumer = getattr(state.consumer, "task_consumer", None)
        queues = [q.name for q in consumer.queues] if consumer else []
        tasks = [{"id": r.id, "name": r.name, "started": r.time_start} for r in list(worker_state.active_requests)]
        return health(queues, tasks)


DEAD_PREFIX = "sturdy.dead."
DEAD = "sturdy_dead_"  # the headers a dead letter carries: reason, queue, build, host, at, deliveries
REQUEUES = "sturdy_requeues"
# A redelivery is counted in the broker under this key for this long (a message waits at most the visibility timeout
# between two deliveries; a week covers any sane one).
DELIVERIES_TTL = 7 * 86400
DEFAULT_MAX_DELIVERIES = 5


class DeadLettered(Exception):
    """The result of a task the agent moved to its queue's dead-letter queue instead of running it."""


def dead_letter_queue(queue: str) -> str:
    """Where the dead letters of `queue` wait: sturdy.dead.<queue> (no worker consumes it)."""
    return queue if queue.startswith(DEAD_PREFIX) else DEAD_PREFIX + queue


def deliveries_key(headers: dict) -> str:
    """The broker key counting the redeliveries of one message: a retry (a new message with the same id) and a
    requeued dead letter start again from zero."""
    return "sturdy.deliveries.{}.{}.{}".format(headers.get("id"), headers.get("retries") or 0,
                                               headers.get(REQUEUES) or 0)


def dead_headers(headers: dict, reason: str, queue: str, deliveries, build, host: str, now: float) -> dict:
    """The message's headers plus why, where from, on which build and host, when, after how many deliveries."""
    dead = {k: v for k, v in headers.items() if k != "redelivered"}
    dead.update({DEAD + "reason": reason, DEAD + "queue": queue, DEAD + "build": build, DEAD + "host": host,
                 DEAD + "at": now, DEAD + "deliveries": deliveries})
    return dead


def requeue_headers(headers: dict) -> dict:
    """A dead letter's headers as it goes back to its queue: counted afresh, the dead-letter marks removed."""
    fresh = {k: v for k, v in headers.items()
             if not k.startswith((DEAD, "x-death", "x-first-death", "x-last-death", "x-delivery-count"))
             and k != "redelivered"}
    fresh[REQUEUES] = int(headers.get(REQUEUES) or 0) + 1
    return fresh


BROKER_DEATHS = {
    "delivery_limit": "delivered more times than the queue's delivery-limit allows (RabbitMQ dead-lettered it: the "
                      "consumer that took it had no sturdy agent)",
    "rejected": "rejected without requeue by its consumer (RabbitMQ dead-lettered it)",
    "expired": "expired in its queue (RabbitMQ dead-lettered it)",
    "maxlen": "dropped by its queue's length limit (RabbitMQ dead-lettered it)",
}


def broker_death(headers: dict) -> dict:
    """A message the broker dead-lettered itself (RabbitMQ's x-death) in the agent's own terms."""
    deaths = headers.get("x-death") or []
    if headers.get(DEAD + "reason") or not deaths or not isinstance(deaths[0], dict):
        return headers
    first = deaths[0]
    at = first.get("time")
    view = dict(headers)
    view.update({DEAD + "reason": BROKER_DEATHS.get(str(first.get("reason")), f"dead-lettered by the broker: "
                                                                              f"{first.get('reason')}"),
                 DEAD + "queue": first.get("queue"), DEAD + "deliveries": headers.get("x-delivery-count"),
                 # py-amqp decodes the AMQP timestamp as a naive UTC datetime.
                 DEAD + "at": at.replace(tzinfo=datetime.timezone.utc).timestamp() if hasattr(at, "replace") else at})
    return view


def describe_dead(headers_list: list[dict], now: float, sample: int = 5) -> dict:
    """What an operator needs about a dead-letter queue: count, reasons, tasks, oldest, a few entries. Never the
    arguments (they can hold personal data or secrets): names, ids, reasons and times only."""
    headers_list = [broker_death(h) for h in headers_list]
    reasons: dict[str, int] = {}
    tasks: dict[str, int] = {}
    times = []
    for h in headers_list:
        reason = str(h.get(DEAD + "reason") or "no reason recorded")
        reasons[reason] = reasons.get(reason, 0) + 1
        tasks[str(h.get("task"))] = tasks.get(str(h.get("task")), 0) + 1
        if isinstance(h.get(DEAD + "at"), (int, float)):
            times.append(h[DEAD + "at"])
    entries = [{"id": h.get("id"), "task": h.get("task"), "reason": h.get(DEAD + "reason"),
                "deliveries": h.get(DEAD + "deliveries"), "build": h.get(DEAD + "build"), "host": h.get(DEAD + "host"),
                "requeues": h.get(REQUEUES) or 0,
                "age": round(now - h[DEAD + "at"], 1) if isinstance(h.get(DEAD + "at"), (int, float)) else None}
               for h in headers_list[:sample]]
    return {"count": len(headers_list), "reasons": reasons, "tasks": tasks,
            "oldest_age": round(now - min(times), 1) if times else None, "sample": entries}


def argument_error(task, args, kwargs) -> str | None:
    """Why the task cannot take these arguments (Celery's own check at the producer, made again in the worker, where
    a message from another build lands), or None."""
    check = getattr(task, "__header__", None)
    if check is None or getattr(task, "typing", True) is False:
        return None
    try:
        check(*(args or ()), **(kwargs or {}))
    except TypeError as exc:
        return str(exc)
    return None


def per_instance_rate(environ=None) -> float | None:
    """STURDY_RATE_LIMIT: tasks per second this instance may start (the process type's rate_limit, split)."""
    environ = os.environ if environ is None else environ
    try:
        rate = float(environ.get("STURDY_RATE_LIMIT") or 0)
    except ValueError:
        return None
    return rate if rate > 0 else None


class Gate:
    """Stands between a worker's consumer and its pool: what Celery hands to the pool passes here first.

    - a message the pool already took and lost (the worker or its child was killed) more than max_deliveries times,
      a message whose arguments the task cannot take, and a message for a task this build does not register are
      moved to their queue's dead-letter queue with the reason, acknowledged, and marked failed in the result
      backend, instead of being run (or dropped, as Celery does with unknown tasks);
    - with STURDY_RATE_LIMIT, tasks start at most at that rate (the smoke job is never held).

    Deliveries: the Redis transport flags a message it restores (its worker died, or it was requeued) as redelivered;
    each hand-off of a redelivered message adds one to a counter in the broker (deliveries_key). The first delivery
    is not counted, so ordinary tasks cost nothing; a message restored before it ever ran counts one more than it ran.
    """

    def __init__(self, consumer, environ=None):
        environ = os.environ if environ is None else environ
        self.consumer = consumer
        self.app = consumer.app
        self.max_deliveries = int(environ.get("STURDY_MAX_DELIVERIES") or DEFAULT_MAX_DELIVERIES)
        self.rate = per_instance_rate(environ)
        self.bucket = None
        self.waiting: collections.deque = collections.deque()
        self.wake = None
        self._conn = None
        self.build = loaded_build()[1] or "unknown"
        self.host = socket.gethostname()
        from celery.utils.log import get_logger  # pylint: disable=import-outside-toplevel

        self.log = get_logger("sturdy_agent")
        if self.rate:
            from kombu.utils.limits import TokenBucket  # pylint: disable=import-outside-toplevel

            self.bucket = TokenBucket(self.rate, capacity=1)

    def connection(self):
        if self._conn is None:
            self._conn = self.app.connection_for_write()
        self._conn.ensure_connection(max_retries=3)
        return self._conn

    def deliveries(self, request) -> int:
        """How many times the pool has been handed this message, this time included."""
        headers = request.message.headers or {}
        info = request.delivery_info or {}
        if not (info.get("redelivered") or headers.get("redelivered")):
            return 1
        if isinstance(headers.get("x-delivery-count"), int):  # RabbitMQ quorum queues count themselves
            return headers["x-delivery-count"] + 1
        client = getattr(self.connection().default_channel, "client", None)
        if client is None or not hasattr(client, "incr"):
            return 2
        key = deliveries_key(headers)
        with client.pipeline() as pipe:
            count, dummy = pipe.incr(key).expire(key, DELIVERIES_TTL).execute()
        return int(count) + 1

    def queue_of(self, message) -> str:
        """The queue a message was taken from (the consumed queue its routing key names)."""
        info = message.delivery_info or {}
        key = info.get("routing_key") or ""
        for queue in self.app.amqp.queues.values():
            if key in (queue.routing_key, queue.name):
                return queue.name
        return key or self.app.conf.task_default_queue

    def dead_letter(self, message, reason: str, deliveries) -> None:
        """Publish a copy of `message` to its queue's dead-letter queue (before the original is acknowledged: a
        crash in between leaves a duplicate there, never a loss)."""
        from kombu import Producer  # pylint: disable=import-outside-toplevel

        queue = self.queue_of(message)
        target = dead_letter_queue(queue)
        headers = dead_headers(dict(message.headers or {}), reason, queue, deliveries, self.build, self.host,
                               time.time())
        props = message.properties or {}
        channel = self.connection().default_channel
        Producer(channel).publish(
            message.body, exchange="", routing_key=target, declare=[own_queue(target)],
            content_type=message.content_type, content_encoding=message.content_encoding, headers=headers,
            **{k: props[k] for k in ("correlation_id", "reply_to", "priority") if props.get(k) is not None})
        self.log.error("sturdy_agent: task %s[%s] moved to dead-letter queue %s: %s (python -m sturdy_agent dead, "
                       "or the sturdy.workers.dead_letters playbook, lists and requeues it)",
                       headers.get("task"), headers.get("id"), target, reason)
        record = task_record_path()
        if record and headers.get("id"):
            close_task_records(os.path.dirname(record), f"dead-lettered to {target}", time.time(),
                               task_id=headers.get("id"))

    def declare_dead_letter_queues(self) -> None:
        """Declare the dead-letter queue of every queue this worker consumes, before it takes a message: a broker that
        dead-letters by itself (a RabbitMQ policy's delivery-limit) drops a message whose dead-letter queue is missing."""
        names = [q for q in (self.app.amqp.queues.consume_from or self.app.amqp.queues)
                 if not q.startswith(SMOKE_PREFIX) and not q.startswith(DEAD_PREFIX)]
        try:
            channel = self.connection().default_channel
            for name in names:
                own_queue(dead_letter_queue(name)).declare(channel=channel)
        except Exception as exc:  # pylint: disable=broad-exception-caught  # the gate declares it again on first use
            self.log.warning("sturdy_agent: could not declare the dead-letter queues of %s: %s", ", ".join(names), exc)

    def on_task_request(self, handoff):
        from celery.worker import state as worker_state  # pylint: disable=import-outside-toplevel

        def gate(request):
            if request.name == SMOKE_TASK:
                return handoff(request)
            if self.bucket is not None:
                self.waiting.append(request)
                return self.pace(pass_gate)
            return pass_gate(request)

        def pass_gate(request):
            reason, deliveries = None, 1
            try:
                wrong = argument_error(request.task, request.args, request.kwargs)
                if wrong:
                    reason = f"arguments do not fit {request.name} in build {self.build}: {wrong}"
                else:
                    deliveries = self.deliveries(request)
                    if deliveries > self.max_deliveries:
                        reason = (f"delivered {deliveries} times without an acknowledgement (max_deliveries="
                                  f"{self.max_deliveries}): the process running it died each time")
                if reason:
                    self.dead_letter(request.message, reason, deliveries)
            except Exception as exc:  # pylint: disable=broad-exception-caught  # the broker is unreachable: run it
                self.log.warning("sturdy_agent: cannot check task %s[%s] (%s); handing it to the pool",
                                 request.name, request.id, exc)
                reason = None
            if not reason:
                return handoff(request)
            request.acknowledge()
            worker_state.task_ready(request)
            request.task.backend.mark_as_failure(request.id, DeadLettered(reason), request=request._context,
                                                 store_result=request.store_errors)
            return None

        return gate

    def pace(self, pass_gate, due=False) -> None:
        """Hand waiting tasks on as the bucket allows; one timer at a time wakes it for the next.

        Not Celery's rate limiting (Consumer._limit_task): it adds a timer entry per held task and per early wake-up,
        and an event loop with more than ten entries due fires ten, then sleeps a second: under a backlog a declared
        10/s fell to 1/s."""
        if due:
            self.wake = None
        while self.waiting and self.bucket.can_consume(1):
            pass_gate(self.waiting.popleft())
        if self.waiting and self.wake is None:
            self.wake = self.consumer.timer.call_after(max(self.bucket.expected_time(1), 0.001), self.pace,
                                                       (pass_gate, True), priority=6)

    def before_reject(self, original, reason):
        """Wrap a Consumer handler that rejects a message (Celery deletes it on Redis): a copy goes to the
        dead-letter queue first, with reason(message, exc), and the original is then acknowledged rather than rejected
        (a RabbitMQ dead-letter policy would otherwise add a second copy, without the reason). When no copy could be
        made, the handler rejects it as Celery does (and such a policy still keeps it)."""
        def copy_then_reject(body, message, exc):
            try:
                self.dead_letter(message, reason(message, exc), 1)
            except Exception as err:  # pylint: disable=broad-exception-caught  # Celery still logs and rejects it
                self.log.error("sturdy_agent: could not move %s to its dead-letter queue: %s",
                               (message.headers or {}).get("id"), err)
                return original(body, message, exc)
            return original(body, _AckOnReject(message), exc)

        return copy_then_reject


class _AckOnReject:
    """A message whose reject acknowledges it: its dead-letter copy is already made."""

    def __init__(self, message):
        self._message = message

    def __getattr__(self, name):
        return getattr(self._message, name)

    def reject_log_error(self, logger, errors, requeue=False):  # pylint: disable=unused-argument
        return self._message.ack_log_error(logger, errors)

    def reject(self, requeue=False):  # pylint: disable=unused-argument
        return self._message.ack()


def install_gate(consumer) -> None:
    """Put a Gate in front of the worker's pool: called once the consumer exists and before it builds its handlers
    (celeryd_after_setup is sent when the worker starts, before its consumer does)."""
    gate = _STATE["gate"] = Gate(consumer)
    consumer.on_task_request = gate.on_task_request(consumer.on_task_request)
    consumer.on_unknown_task = gate.before_reject(
        consumer.on_unknown_task,
        lambda message, exc: f"unknown task {(message.headers or {}).get('task') or '?'} in build {gate.build}")
    consumer.on_invalid_task = gate.before_reject(
        consumer.on_invalid_task, lambda message, exc: f"invalid message in build {gate.build}: {exc}")


def pool_load(reserved, held) -> list:
    """The tasks (smoke jobs aside) this worker has handed to its pool: reserved, minus those the gate still holds."""
    held = {id(r) for r in held}
    return [r for r in reserved if r.name != SMOKE_TASK and id(r) not in held]


def expired(headers: dict, now: datetime.datetime) -> bool:
    stamp = headers.get("expires")
    if not stamp:
        return False
    try:
        return datetime.datetime.fromisoformat(str(stamp)) < now
    except (TypeError, ValueError):
        return False


def reply_url(broker_url: str) -> str:
    """The result backend a smoke answer travels through when the app has none (many apps send tasks and never read
    a result): the broker's own Redis database on Redis, a reply queue of the sender's (rpc://) on any other broker."""
    scheme = broker_url.partition("://")[0].lower()
    return broker_url if scheme in ("redis", "rediss", "redis+socket") else "rpc://"


def reply_backend(app):
    """The backend the smoke task answers through: the app's result backend, or, for an app with none, one on the
    broker (reply_url()) that only the smoke task uses: the app's own tasks still store nothing. One per process (the
    pool's children make their own connections)."""
    if app.conf.result_backend:
        return app.backend
    backends = _STATE.setdefault("reply_backends", {})
    if os.getpid() not in backends:
        from celery.app.backends import by_url  # pylint: disable=import-outside-toplevel

        cls, url = by_url(reply_url(app.connection_for_write().as_uri(include_password=True)), app.loader)
        backends[os.getpid()] = cls(app=app, url=url)
    return backends[os.getpid()]


def answer_smoke(consumer, message, to_pool, reserved) -> None:
    """Hand a smoke job to the pool when a slot is free; when every slot is busy, answer it from here (the worker's
    main process, which loaded the same release) with the tasks occupying the slots: proof the instance runs the build
    and takes work, without waiting for the backlog. `reserved`: the requests the worker holds (Celery's state)."""
    gate = _STATE.get("gate")
    load = pool_load(list(reserved), list(gate.waiting) if gate else [])
    if len(load) < (_STATE.get("concurrency") or 1):
        return to_pool(message)
    headers = message.headers or {}
    if expired(headers, datetime.datetime.now(datetime.timezone.utc)):
        return message.ack()  # the deploy that sent it stopped waiting long ago
    try:
        token = message.decode()[0][0]
    except (TypeError, ValueError, IndexError, KeyError):
        token = None
    now = time.time()
    busy = [{"id": r.id, "name": r.name, "running_for": round(now - r.time_start, 1) if r.time_start else None}
            for r in load]
    app = consumer.app
    queues = list(app.amqp.queues.consume_from or app.amqp.queues)
    backend = reply_backend(app)
    # rpc:// sends the answer to the sender's reply queue, which the message names (the pool's path reads it from the
    # task's request); a key-value backend needs no request.
    request = (types.SimpleNamespace(reply_to=(message.properties or {}).get("reply_to"), children=[],
                                     correlation_id=(message.properties or {}).get("correlation_id") or headers.get("id"))
               if hasattr(backend, "destination_for") else None)
    backend.store_result(headers.get("id"), answer(token, app.conf, queues, "worker", busy), "SUCCESS", request=request)
    if getattr(gate, "log", None) is not None:
        gate.log.info("sturdy_agent: smoke job %s answered by the worker itself: every pool slot is busy (%s)",
                      headers.get("id"), ", ".join(f"{b['name']}[{b['id']}]" for b in busy))
    return message.ack()


def smoke_consumer_step():
    """A consumer bootstep for the instance's smoke queue, on a channel of its own: the task consumer's prefetch limit
    (full while long tasks run) does not hold the smoke job back, and it is restarted with the connection."""
    from celery import bootsteps  # pylint: disable=import-outside-toplevel
    from celery.worker import state as worker_state  # pylint: disable=import-outside-toplevel
    from kombu import Consumer  # pylint: disable=import-outside-toplevel

    class SmokeConsumer(bootsteps.ConsumerStep):
        requires = ("celery.worker.consumer.tasks:Tasks",)

        def start(self, c):
            self.c, self.to_pool = c, c.create_task_handler()  # pylint: disable=attribute-defined-outside-init
            super().start(c)

        def _close(self, c, cancel_consumers=True):
            if c.connection is None:  # lost with the broker: its channel went with it
                self.consumers = None  # pylint: disable=attribute-defined-outside-init
                return
            super()._close(c, cancel_consumers)

        def get_consumers(self, channel):
            return [Consumer(channel, queues=[own_queue(own_smoke_queue())], accept=self.c.app.conf.accept_content,
                             on_message=lambda message: answer_smoke(self.c, message, self.to_pool,
                                                                     worker_state.reserved_requests))]

    return SmokeConsumer


def loop_alive() -> None:
    """The event loop's watchdog feed; after a broker outage it also says the worker consumes again."""
    if _STATE.pop("waiting_for_broker", None):
        notify(f"WATCHDOG=1\nSTATUS=consuming ({_STATE.get('node')})")
    else:
        notify("WATCHDOG=1")


def waiting_for_broker() -> None:
    """Called about every second while Celery's consumer retries a lost broker connection (its loop is blocked in
    kombu's retry, not hung): feeds the watchdog, so a broker outage longer than WatchdogSec= does not get every worker
    killed and restarted, and says so in `systemctl status`."""
    if _STATE.get("watchdog") is None:
        return
    since = _STATE.setdefault("waiting_for_broker", time.strftime("%H:%M:%S"))
    notify(f"WATCHDOG=1\nSTATUS=waiting for the broker since {since} (reconnecting)")


def feed_while_reconnecting() -> None:
    """Hook waiting_for_broker into the callback Celery's consumer gives kombu's connection retry (maybe_shutdown,
    called between retries)."""
    from celery.worker.consumer import consumer  # pylint: disable=import-outside-toplevel

    original = consumer.maybe_shutdown
    if getattr(original, "sturdy_agent", False):
        return

    def maybe_shutdown():
        original()
        waiting_for_broker()

    maybe_shutdown.sturdy_agent = True
    consumer.maybe_shutdown = maybe_shutdown


def install_celery_hooks() -> None:
    """Connect to Celery's worker signals (called at interpreter start when STURDY_AGENT=celery)."""
    from celery import signals  # pylint: disable=import-outside-toplevel

    def after_setup(sender=None, instance=None, **_):
        app = instance.app
        _STATE.update(main_pid=os.getpid(), node=sender, concurrency=getattr(instance, "concurrency", None),
                      pool=pool_name(getattr(instance, "pool_cls", None)),
                      max_tasks_per_child=getattr(instance, "max_tasks_per_child", None),
                      max_memory_per_child=getattr(instance, "max_memory_per_child", None))
        record = task_record_path()
        if record:
            prune_task_records(os.path.dirname(record), time.time())

        class SmokeTask(app.Task):  # pylint: disable=abstract-method
            """The smoke job answers through reply_backend(): the app's result backend, or the agent's own."""

            @property
            def backend(self):
                return reply_backend(self.app)

            @backend.setter
            def backend(self, value):
                pass

        @app.task(name=SMOKE_TASK, bind=True, base=SmokeTask, acks_late=False, ignore_result=False)
        def smoke(task, token):
            return answer(token, task.app.conf, list(task.app.amqp.queues.consume_from or task.app.amqp.queues), "pool")

        _STATE["smoke"] = smoke
        register_health()
        if getattr(instance, "consumer", None) is not None:
            install_gate(instance.consumer)

    def ready(sender=None, **_):
        if _STATE.get("gate") is not None:
            _STATE["gate"].declare_dead_letter_queues()
        notify(f"READY=1\nSTATUS=consuming ({_STATE.get('node')})")
        usec = int(os.environ.get("WATCHDOG_USEC") or 0)
        timer = getattr(sender, "timer", None)
        if usec and timer is not None:
            # Fed from the worker's event loop: a loop that hangs stops feeding and systemd restarts the unit.
            _STATE["watchdog"] = timer.call_repeatedly(usec / 2e6, loop_alive, priority=10)
        if timer is not None and "popped" in _STATE:
            timer.call_repeatedly(2.0, push_back_popped, (sender.app,), priority=10)
        feed_while_reconnecting()

    def init(sender=None, instance=None, **_):
        # Before the worker builds its consumer: the smoke queue gets a consumer step of its own.
        if own_smoke_queue():
            instance.app.steps["consumer"].add(smoke_consumer_step())
        keep_started_jobs_at_shutdown()
        if getattr(instance.app.connection_for_write(), "transport_cls", None) in ("redis", "rediss", "sentinel"):
            keep_messages_popped_as_the_broker_left()

    def stopping(sig=None, how=None, **_):
        notify(f"STOPPING=1\nSTATUS={how} shutdown ({sig})")

    def task_started(task_id=None, task=None, **_):
        record_task_start(task_id, getattr(task, "name", None))

    def child_started(**_):
        close_dead_children_records()

    def task_ended(**_):
        record_task_end()

    signals.task_prerun.connect(task_started, weak=False)
    signals.worker_process_init.connect(child_started, weak=False)
    signals.task_postrun.connect(task_ended, weak=False)

    def counter(outcome):
        def count(sender=None, request=None, **_):
            count_outcome(getattr(sender, "name", None) or getattr(request, "task", None), outcome)
        return count

    for signal_name, outcome in COUNTED.items():
        getattr(signals, signal_name).connect(counter(outcome), weak=False)

    def stamp(headers=None, **_):
        # Celery messages carry no publish time: without one, a queue's age cannot be told.
        if isinstance(headers, dict):
            headers.setdefault(SENT_HEADER, time.time())

    signals.before_task_publish.connect(stamp, weak=False)
    signals.celeryd_init.connect(init, weak=False)
    signals.celeryd_after_setup.connect(after_setup, weak=False)
    signals.worker_ready.connect(ready, weak=False)
    signals.worker_shutting_down.connect(stopping, weak=False)


def keep_started_jobs_at_shutdown() -> None:
    """At a warm shutdown, keep in the prefork pool the jobs already handed to a child process whose start the main
    process has not read yet.

    The consumer's close flushes the pool. Since Celery 5.6.3 (celery#10151) that flush drops every job whose start
    notice is not read yet, although a child may already run it: the child finishes it, the main process ignores the
    result, the message is never acknowledged, and the channel's close puts it back (kombu's "Restoring 1
    unacknowledged message(s)"), so the task runs twice. A busy machine widens that window. While the pool closes,
    such a job stays: its start and result are read as the pool drains, and it is acknowledged before the channel
    closes, as Celery up to 5.6.2 did. Jobs no child was given are still dropped and their messages put back."""
    try:
        from celery.concurrency import asynpool  # pylint: disable=import-outside-toplevel
    except ImportError:  # not the prefork pool's module: nothing to keep
        return
    pool_class, flush = asynpool.AsynPool, asynpool.AsynPool.flush
    if getattr(flush, "sturdy", False):
        return

    def writer_of(job):
        ref = getattr(job, "_writer", None)  # a weak reference to the generator that writes it, while it does
        return ref() if ref is not None else None

    def sturdy_flush(self):
        if self._state == asynpool.RUN or self.synack:  # pylint: disable=protected-access
            return flush(self)
        # Written to a child in full: a job still being written is dropped as before (its child never starts it).
        writing = set(getattr(self, "_active_writers", ()))
        given = [job for job in tuple(self._cache.values())  # pylint: disable=protected-access
                 if not job._accepted and getattr(job, "_write_to", None) is not None  # pylint: disable=protected-access
                 and writer_of(job) not in writing]
        for job in given:
            job._accepted = True  # pylint: disable=protected-access
        try:
            return flush(self)
        finally:
            for job in given:
                job._accepted = False  # pylint: disable=protected-access

    sturdy_flush.sturdy = True
    pool_class.flush = sturdy_flush


def keep_messages_popped_as_the_broker_left() -> None:
    """On Redis, keep a message the broker handed out in the instant it went away, instead of losing it.

    kombu's Redis transport takes a message off its list (BRPOP) and records it as unacknowledged in a second command
    (QoS.append). When the broker is gone by then, the message is in this process alone: kombu drops it with the
    connection error, and nothing in the broker can hand it out again. Such a message is kept here and put back at the
    head of its queue once the broker answers again (push_back_popped, on the worker's timer). Kept in memory: a
    worker stopped before the broker is back still loses it."""
    try:
        from kombu.transport import redis as kombu_redis  # pylint: disable=import-outside-toplevel
    except ImportError:  # no redis-py: not the Redis transport
        return
    _STATE.setdefault("popped", [])
    original = kombu_redis.QoS.append
    if getattr(original, "sturdy", False):
        return

    def sturdy_append(qos, message, delivery_tag):
        try:
            return original(qos, message, delivery_tag)
        except qos.channel.connection_errors:
            info = message.delivery_info or {}
            _STATE["popped"].append((message._raw,  # pylint: disable=protected-access
                                     info.get("exchange"), info.get("routing_key")))
            raise

    sturdy_append.sturdy = True
    kombu_redis.QoS.append = sturdy_append


def push_back_popped(app, log=None) -> int:
    """Put the messages keep_messages_popped_as_the_broker_left kept back at the head of their queues, flagged
    redelivered (the delivery ceiling counts it), once the broker answers; how many. Called on the worker's timer,
    which runs while the worker is connected."""
    popped = _STATE.get("popped")
    if not popped:
        return 0
    if log is None:
        from celery.utils.log import get_logger  # pylint: disable=import-outside-toplevel

        log = get_logger("sturdy_agent")
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=2)
            channel = conn.default_channel
            with channel.client.pipeline() as pipe:
                for payload, exchange, routing_key in popped:
                    channel._do_restore_message(payload, exchange, routing_key, pipe,  # pylint: disable=protected-access
                                                leftmost=True)
                pipe.execute()
    except Exception as exc:  # pylint: disable=broad-exception-caught  # the broker is still away: at the next tick
        log.warning("sturdy_agent: %d message(s) the broker handed out as it went away wait to be put back: %s",
                    len(popped), exc)
        return 0
    count = len(popped)
    log.warning("sturdy_agent: put %d message(s) the broker handed out as it went away back at the head of their "
                "queue(s) (kombu had not recorded them as unacknowledged)", count)
    popped.clear()
    return count


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


def rq_smoke(token: str) -> dict:
    """The smoke job of an RQ worker (RQ_SMOKE_JOB), run by the work horse (its parent is the worker's main process)."""
    return {**identity(token, "pool", [], _STATE.get("queues", []), _STATE.get("main_pid", os.getppid())),
            "settings": {}}


def install_rq_hooks() -> None:
    """Hook into RQ's worker class (RQ 2): the instance's smoke queue first among its queues, its build in its
    registration, READY=1 once it listens, STOPPING=1 on warm shutdown, a record and a count of each job."""
    try:
        from rq.worker import BaseWorker as worker_class  # pylint: disable=import-outside-toplevel
    except ImportError:  # RQ 1.x
        from rq.worker import Worker as worker_class  # pylint: disable=import-outside-toplevel
    from rq.exceptions import StopRequested  # pylint: disable=import-outside-toplevel
    from rq.queue import Queue  # pylint: disable=import-outside-toplevel

    bootstrap, install_signals = worker_class.bootstrap, worker_class._install_signal_handlers  # pylint: disable=protected-access
    request_stop, perform_job = worker_class.request_stop, worker_class.perform_job
    prepare_execution, set_state = worker_class.prepare_execution, worker_class.set_state
    shutdown = worker_class._shutdown  # pylint: disable=protected-access
    pops = {name: getattr(Queue, name).__func__ for name in ("lpop", "lmove") if hasattr(Queue, name)}

    def sturdy_bootstrap(self, *args, **kwargs):
        name = own_smoke_queue()
        if name and name not in self.queue_names():
            # First: the default dequeue order takes it before any waiting job.
            queue = self.queue_class(name=name, connection=self.connection, job_class=self.job_class,
                                     serializer=self.serializer)
            self.queues.insert(0, queue)
            self._ordered_queues.insert(0, queue)  # pylint: disable=protected-access
        result = bootstrap(self, *args, **kwargs)
        release, build_id = loaded_build()
        _STATE.update(main_pid=os.getpid(), queues=self.queue_names(), rq_worker=self)
        record = task_record_path()
        if record:
            prune_task_records(os.path.dirname(record), time.time())
        # What the smoke client answers for an instance whose horse is busy with a long job: its registration.
        serializer = getattr(self, "_serializer_arg", None) or ""
        self.connection.hset(self.key, mapping={"sturdy_build_id": build_id or "", "sturdy_release": release or "",
                                                "sturdy_unit": unit_name(), "sturdy_pid": os.getpid(),
                                                "sturdy_serializer": serializer})
        return result

    def sturdy_install_signals(self, *args, **kwargs):
        result = install_signals(self, *args, **kwargs)
        # work() installs its SIGTERM handler (warm shutdown) right before its loop: ready, and stoppable.
        notify(f"READY=1\nSTATUS=listening on {', '.join(self.queue_names())}")
        return result

    def sturdy_request_stop(self, signum, frame):
        notify(f"STOPPING=1\nSTATUS=warm shutdown (signal {signum}): the running job finishes first")
        return request_stop(self, signum, frame)

    def sturdy_shutdown(self):
        # RQ raises StopRequested from the signal handler unless its state is busy. Raised inside the pop, that loses
        # the job Redis hands over at that moment: the reply being read, or a BLPOP the server serves before it sees
        # the connection close. Raised after the pop, before the job starts, it loses the job taken (RQ issues #2236,
        # #2079). So, unless busy (RQ's own path, which does not raise), the agent only asks the loop to stop: a pop
        # under way ends within RQ_POP_SECONDS, the job it took runs, and no new pop starts.
        state = self.get_state()
        if str(getattr(state, "value", state)) == "busy":
            return shutdown(self)
        self._stop_requested = True  # pylint: disable=protected-access
        if hasattr(self, "set_shutdown_requested_date"):
            self.set_shutdown_requested_date()
        if getattr(self, "scheduler", None):
            self.stop_scheduler()
        return None

    def popping(original):
        signature = inspect.signature(original)

        def pop(cls, *args, **kwargs):
            worker = _STATE.get("rq_worker")
            if worker is not None and getattr(worker, "_stop_requested", False):
                raise StopRequested()  # a stop asked for before the pop: take nothing more
            call = signature.bind(cls, *args, **kwargs)
            timeout = call.arguments.get("timeout")
            if timeout is not None and timeout > RQ_POP_SECONDS:
                # RQ blocks up to worker_ttl - 15 s (405 s): short pops let a stop end the wait within seconds.
                call.arguments["timeout"] = RQ_POP_SECONDS
            return original(*call.args, **call.kwargs)
        return classmethod(pop)

    def sturdy_perform_job(self, job, *args, **kwargs):
        name = getattr(job, "func_name", None)
        record_task_start(job.id, name)
        try:
            ok = perform_job(self, job, *args, **kwargs)
        finally:
            record_task_end()
        count_outcome(name, "succeeded" if ok else "failed")
        return ok

    def sturdy_prepare_execution(self, job, *args, **kwargs):
        # The main process names the job its horse runs (RQ 2 keeps it in its executions, not in the worker's hash).
        self.connection.hset(self.key, mapping={"sturdy_job": job.id, "sturdy_job_name": job.func_name or "",
                                                "sturdy_job_started": time.time()})
        return prepare_execution(self, job, *args, **kwargs)

    def sturdy_set_state(self, state, *args, **kwargs):
        result = set_state(self, state, *args, **kwargs)
        if str(getattr(state, "value", state)) == "idle":
            self.connection.hdel(self.key, "sturdy_job", "sturdy_job_name", "sturdy_job_started")
        return result

    worker_class.bootstrap = sturdy_bootstrap
    worker_class.prepare_execution = sturdy_prepare_execution
    worker_class.set_state = sturdy_set_state
    worker_class._install_signal_handlers = sturdy_install_signals  # pylint: disable=protected-access
    worker_class.request_stop = sturdy_request_stop
    worker_class.perform_job = sturdy_perform_job
    worker_class._shutdown = sturdy_shutdown  # pylint: disable=protected-access
    for name, original in pops.items():
        setattr(Queue, name, popping(original))


HOOKS = {"celery": install_celery_hooks, "rq": install_rq_hooks}


def dump_stacks_when_killed() -> None:
    """Python's faulthandler for the worker (and the processes it forks): the SIGABRT of a watchdog timeout, and a
    crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL), write every thread's stack to stderr, the unit's journal, before the
    process dies: where a worker that stopped feeding its watchdog was stuck, which `diagnose` then shows."""
    import faulthandler  # pylint: disable=import-outside-toplevel

    if not faulthandler.is_enabled():
        faulthandler.enable(all_threads=True)


def activate(environ=None) -> None:
    """Entry from sturdy_agent.pth: hook in only where the unit asks for it; never break the interpreter."""
    environ = os.environ if environ is None else environ
    kind = environ.get("STURDY_AGENT")
    if kind not in HOOKS or _STATE.get("hooked"):
        return
    _STATE["hooked"] = True
    # Python programs a task starts inherit the environment: they must not hook into the framework too.
    os.environ.pop("STURDY_AGENT", None)
    if kind == "rq":
        rq_url_from_credentials(environ)
    dump_stacks_when_killed()
    try:
        HOOKS[kind]()
    except (ImportError, AttributeError) as exc:
        sys.stderr.write(f"sturdy_agent: STURDY_AGENT={kind} but its worker cannot be hooked ({exc}); "
                         "no readiness or smoke queue for this process\n")


def _celery_app(spec: str):
    """The Celery app named like `-A`: module, or module:attribute."""
    import importlib  # pylint: disable=import-outside-toplevel

    module_name, dummy, attr = spec.partition(":")
    module = importlib.import_module(module_name)
    if attr:
        return getattr(module, attr)
    for name in ("app", "celery"):
        if hasattr(getattr(module, name, None), "send_task"):
            return getattr(module, name)
    raise SystemExit(f"sturdy_agent: no Celery app named app or celery in {module_name}; pass module:attribute")


def smoke(celery_app: str, targets: list[str], timeout: float) -> list[dict]:
    """Send one smoke job to each queue and wait for all answers until the deadline.

    A real queue that already holds messages gets no job (it would wait behind them, past any deadline): its proof is
    the workers consuming it now, each naming its build (the sturdy_health query their main processes answer)."""
    app = _celery_app(celery_app)
    if not app.conf.result_backend:
        # The app stores no results: the answers come back as the workers' smoke task sends them (reply_backend()).
        app.conf.result_backend = reply_url(app.connection_for_write().as_uri(include_password=True))
    # A result backend that goes away while the answers are awaited is retried about once a second for the timeout,
    # not Celery's 20 tries, so that a broker gone for good fails the smoke job within its deadline.
    app.conf.result_backend_transport_options = {
        **(getattr(app.conf, "result_backend_transport_options", None) or {}),
        "retry_policy": {"max_retries": max(1, int(timeout)), "interval_start": 0, "interval_step": 1,
                         "interval_max": 1}}
    backlog = waiting(app, [q for q in targets if not q.startswith(SMOKE_PREFIX)])
    sent, found = [], {}
    # One deadline for taking every job: a broker that refuses connections fails them all within the timeout, not
    # one timeout per queue.
    send_by = time.monotonic() + timeout
    for queue in targets:
        if backlog.get(queue):
            continue
        token = uuid.uuid4().hex
        started = time.monotonic()
        # expires: a job nobody took in time is dropped instead of answering a later deploy.
        # A real queue is named as the app routes it; an instance's smoke queue is declared as its worker declares it.
        destination = own_queue(queue) if queue.startswith(SMOKE_PREFIX) else queue
        try:
            result = through_an_outage(lambda: app.send_task(SMOKE_TASK, args=[token], queue=destination,
                                                             expires=timeout), send_by)
        except Exception as exc:  # pylint: disable=broad-exception-caught  # reported per queue
            found[queue] = {"queue": queue, "token": token, **failed(exc)}
            continue
        sent.append((queue, token, started, result))
    deadline = time.monotonic() + timeout
    for queue, token, started, result in sent:
        entry = {"queue": queue, "token": token}
        try:
            got = through_an_outage(lambda: result.get(timeout=max(0.1, deadline - time.monotonic()),
                                                       propagate=True), deadline)
            entry.update(ok=got.get("token") == token, answer=got, latency=round(time.monotonic() - started, 3))
        except Exception as exc:  # pylint: disable=broad-exception-caught  # reported per queue
            entry.update(failed(exc))
        found[queue] = entry
    if any(backlog.values()):
        started = time.monotonic()
        nodes = through_an_outage(lambda: health_of(app, min(timeout, 5.0)), started + timeout)
        for queue, depth in backlog.items():
            if depth:
                consumers = [{"node": node, **{k: reply.get(k) for k in ("build_id", "host", "unit")}}
                             for node, reply in sorted(nodes.items()) if queue in reply.get("queues", [])]
                found[queue] = {"queue": queue, "backlog": depth, "consumers": consumers, "ok": bool(consumers),
                                "latency": round(time.monotonic() - started, 3)}
    return [found[queue] for queue in targets if queue in found]


def rq_workers(conn, queue: str) -> list[dict]:
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


def rq_registered_answer(token: str, worker: dict) -> dict:
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


def rq_smoke_client(targets: list[str], timeout: float) -> list[dict]:
    """Send one smoke job to each queue through RQ and wait for all answers until the deadline (the same entries as
    smoke()). An instance whose horse is busy answers from its registration; a real queue that holds jobs gets no job
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
            workers = rq_workers(conn, name)
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
                busy = [w for w in rq_workers(conn, name) if w.get("sturdy_job") not in (None, "", job.id)]
                if name.startswith(SMOKE_PREFIX) and status == "queued" and busy \
                        and time.monotonic() - started > 0.5:
                    queue.remove(job.id)
                    job.delete()
                    found[name] = dict(entry, ok=True, answer=rq_registered_answer(token, busy[0]),
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


def rq_queue_stats(queues: list[str]) -> list[dict]:
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
            entry["consumers"] = sorted(w["name"] for w in rq_workers(conn, name))
            entry["failed_jobs"] = FailedJobRegistry(name, connection=conn).count
        except Exception as exc:  # pylint: disable=broad-exception-caught  # reported per queue
            entry["error"] = f"{type(exc).__name__}: {exc}"
        found.append(entry)
    return found


def rq_job_states(ids: list[str]) -> list[dict]:
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


# What a broker (or result backend) that does not answer raises: kombu's, redis-py's and the socket's own errors.
UNREACHABLE = ("OperationalError", "ConnectionError", "ConnectionRefusedError", "ConnectionResetError",
               "RecvError", "AMQPConnectionError", "gaierror")


def failed(exc: BaseException) -> dict:
    """A smoke entry for a job that failed: its error, and whether the broker could not be reached at all (or the
    result backend: Celery gives up reconnecting to it with a RuntimeError)."""
    socket_error = isinstance(exc, OSError) and not isinstance(exc, TimeoutError)
    backend_gone = isinstance(exc, RuntimeError) and "Retry limit exceeded while trying to reconnect" in str(exc)
    text = " ".join(str(exc).split())
    return {"ok": False, "error": f"{type(exc).__name__}: {text}" if text else type(exc).__name__,
            "unreachable": type(exc).__name__ in UNREACHABLE or socket_error or backend_gone}


def through_an_outage(call, deadline: float):
    """call() again each second while the broker does not answer, until `deadline` (time.monotonic()): a broker
    restarted during a deploy (seconds) delays its smoke jobs instead of failing them; one still away then does."""
    while True:
        try:
            return call()
        except Exception as exc:  # pylint: disable=broad-exception-caught  # only an unreachable broker is waited for
            if not failed(exc)["unreachable"] or time.monotonic() + 1 > deadline:
                raise
            time.sleep(1)


def waiting(app, queues: list[str]) -> dict:
    """How many messages each queue holds (0 where it cannot be told: the smoke job is sent then)."""
    counts = dict.fromkeys(queues, 0)
    if not queues:
        return counts
    try:
        with app.connection_for_read() as conn:
            channel = conn.channel()
            for queue in queues:
                counts[queue], channel = _depth(conn, channel, queue)
    except Exception:  # pylint: disable=broad-exception-caught  # the job itself tells
        pass
    return counts


def health_of(app, timeout: float) -> dict:
    """{node: sturdy_health answer} of every worker of the app that answers within `timeout`."""
    replies = app.control.broadcast("sturdy_health", reply=True, timeout=timeout)
    return {node: answer for reply in replies or [] for node, answer in reply.items()
            if isinstance(answer, dict) and "queues" in answer}


def oldest_waiting(raw, now: float) -> dict:
    """The oldest message of a Redis list queue (kombu's JSON envelope): its task, id and age when stamped."""
    try:
        message = json.loads(raw)
        headers = message.get("headers") or {}
    except (TypeError, ValueError, AttributeError):
        return {"oldest_task": None, "oldest_age": None, "oldest_stamped": False}
    sent = headers.get(SENT_HEADER)
    return {"oldest_task": headers.get("task"), "oldest_id": headers.get("id"),
            "oldest_age": round(max(0.0, now - float(sent)), 1) if isinstance(sent, (int, float)) else None,
            "oldest_stamped": isinstance(sent, (int, float))}


def queue_stats(celery_app: str, queues: list[str], timeout: float) -> list[dict]:
    """Depth, oldest waiting message and live consumers of each queue, through the app's own broker connection.

    Consumers are the workers that answer a remote-control ping for their queues within `timeout` (a worker whose
    event loop is alive answers even while its pool runs long tasks).
    """
    app = _celery_app(celery_app)
    found = []
    with app.connection_for_read() as conn:
        channel = conn.channel()
        for queue in queues:
            entry = {"queue": queue, "depth": 0, "oldest_task": None, "oldest_age": None, "oldest_stamped": None,
                     "dead_letter_depth": None}
            try:
                entry["depth"], channel = _depth(conn, channel, queue)
                entry["dead_letter_depth"], channel = _depth(conn, channel, dead_letter_queue(queue))
            except Exception as exc:  # pylint: disable=broad-exception-caught  # reported per queue
                entry["error"] = f"{type(exc).__name__}: {exc}"
                channel = conn.channel()
            client = getattr(channel, "client", None)
            if entry["depth"] and client is not None and hasattr(client, "lindex"):
                # Redis: LPUSH to publish, BRPOP to consume, so the oldest message is the last.
                entry.update(oldest_waiting(client.lindex(queue, -1), time.time()))
            found.append(entry)
    try:
        replies = app.control.inspect(timeout=timeout).active_queues() or {}
    except Exception as exc:  # pylint: disable=broad-exception-caught  # reported, the depths still count
        replies, error = {}, f"{type(exc).__name__}: {exc}"
    else:
        error = None
    for entry in found:
        entry["consumers"] = sorted(node for node, consumed in replies.items()
                                    if any(q.get("name") == entry["queue"] for q in consumed or []))
        if error:
            entry["consumers_error"] = error
    return found


def _depth(conn, channel, queue: str):
    """(message count, channel): 0 for a queue not declared yet (AMQP closes the channel then: a new one)."""
    try:
        return channel.queue_declare(queue=queue, passive=True).message_count, channel
    except Exception as exc:  # pylint: disable=broad-exception-caught  # a queue not declared yet is empty
        if "NOT_FOUND" not in str(exc) and "404" not in str(exc):
            raise
        return 0, conn.channel()


def _headers_of(raw) -> dict:
    try:
        return json.loads(raw).get("headers") or {}
    except (TypeError, ValueError, AttributeError):
        return {}


def dead_letters(celery_app: str, action: str, queues: list[str], limit: int = 0, confirm: bool = False) -> list[dict]:
    """list, requeue or discard the dead letters of each queue (never the queue itself: only sturdy.dead.<queue>).

    requeue publishes each dead letter back to its queue before removing it (a failure in between leaves a copy in the
    dead-letter queue, never a loss), oldest first; discard needs confirm=True."""
    from kombu import Producer  # pylint: disable=import-outside-toplevel

    if action == "discard" and not confirm:
        raise SystemExit("sturdy_agent: discard deletes dead letters for good; pass --confirm-discard to mean it")
    app = _celery_app(celery_app)
    found = []
    now = time.time()
    with app.connection_for_write() as conn:
        channel = conn.channel()
        for queue in queues:
            source = queue[len(DEAD_PREFIX):] if queue.startswith(DEAD_PREFIX) else queue
            target = dead_letter_queue(source)
            depth, channel = _depth(conn, channel, target)
            entry = {"queue": source, "dead_letter_queue": target, "count": depth}
            if action == "list":
                client = getattr(channel, "client", None)
                if client is not None and hasattr(client, "lrange"):
                    # Redis: published with LPUSH, so the oldest is last; reading does not take them.
                    raws = client.lrange(target, -(limit or 1000), -1)[::-1]
                    entry.update(describe_dead([_headers_of(r) for r in raws], now))
                else:
                    got = []
                    while depth and len(got) < min(depth, limit or 1000):
                        message = channel.basic_get(target, no_ack=False)
                        if message is None:
                            break
                        got.append(dict(message.headers or {}))
                    entry.update(describe_dead(got, now))
                    # Not acknowledged: closing the channel gives them back in order.
                    channel.close()
                    channel = conn.channel()
                entry["count"] = depth
            else:
                declare = [own_queue(source)]
                if action == "requeue" and depth and conn.transport.driver_type == "amqp":
                    # Not declared on RabbitMQ: the app declares its queues there with arguments (a quorum type) that a
                    # plain declaration would contradict; and a message sent to a queue that does not exist is lost.
                    declare = []
                    try:
                        channel.queue_declare(queue=source, passive=True)
                    except Exception as exc:  # pylint: disable=broad-exception-caught  # NOT_FOUND, named below
                        raise SystemExit(f"sturdy_agent: queue {source} does not exist on the broker ({exc}); start "
                                         "its workers (they declare it), then requeue its dead letters") from exc
                done = 0
                producer = Producer(channel)
                # Only what is there now: a requeued message that dies again comes back behind them.
                limit = min(limit, depth) if limit else depth
                source_queue = own_queue(target)(channel)
                while done < limit:
                    # Through kombu (not the channel): a message that acknowledges itself on every transport.
                    message = source_queue.get(no_ack=False)
                    if message is None:
                        break
                    if action == "requeue":
                        headers = dict(message.headers or {})
                        back = headers.get(DEAD + "queue") or source
                        props = message.properties or {}
                        producer.publish(
                            message.body, exchange="", routing_key=back, declare=declare if back == source else [],
                            content_type=message.content_type, content_encoding=message.content_encoding,
                            headers=requeue_headers(headers),
                            **{k: props[k] for k in ("correlation_id", "reply_to", "priority")
                               if props.get(k) is not None})
                    message.ack()
                    done += 1
                entry["moved"] = done
                entry["count"], channel = _depth(conn, channel, target)
            found.append(entry)
    return found


def registered(celery_app: str) -> list[str]:
    """The task names the app registers, as its worker would see them (the app's modules and its `imports`/`include`
    loaded, the app finalized), without starting a worker. The agent's smoke task counts: every worker has it."""
    app = _celery_app(celery_app)
    app.loader.import_default_modules()
    app.finalize(auto=True)
    return sorted(set(app.tasks.keys()) | {SMOKE_TASK})


def waiting_tasks(celery_app: str, queues: list[str], scan: int = 200000) -> list[dict]:
    """Per queue, how many waiting messages name each task (read without taking them: Redis only), up to `scan`
    messages per queue; `scanned` says how many were read."""
    app = _celery_app(celery_app)
    found = []
    with app.connection_for_read() as conn:
        channel = conn.channel()
        client = getattr(channel, "client", None)
        for queue in queues:
            entry = {"queue": queue, "tasks": {}, "scanned": 0}
            if client is None or not hasattr(client, "lrange"):
                # RabbitMQ hands a message out only as a delivery, which a quorum queue counts towards its
                # delivery-limit: the names are left unread, the depth is told.
                entry["error"] = (f"the {conn.transport.driver_type} broker shows no waiting message without "
                                  "delivering it, so the task names waiting in it are not read")
                entry["depth"], channel = _depth(conn, channel, queue)
                found.append(entry)
                continue
            depth = client.llen(queue)
            for start in range(0, min(depth, scan), 1000):
                for raw in client.lrange(queue, start, min(start + 999, scan - 1)):
                    name = str(_headers_of(raw).get("task") or "?")
                    entry["tasks"][name] = entry["tasks"].get(name, 0) + 1
                    entry["scanned"] += 1
            entry["depth"] = depth
            found.append(entry)
    return found


def task_states(celery_app: str, ids: list[str], scan: int = 10000) -> list[dict]:
    """Each task's state in the result backend and, on Redis, whether the broker holds it unacknowledged and which
    dead-letter queue holds it (the newest `scan` messages of each are read)."""
    app = _celery_app(celery_app)
    unacked, dead = "", {}
    with app.connection_for_read() as conn:
        client = getattr(conn.channel(), "client", None)
        if client is not None and hasattr(client, "hvals"):
            # kombu's Redis transport keeps delivered, unacknowledged messages in the hash "unacked".
            unacked = "\n".join(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                                for v in client.hvals("unacked"))
            for key in client.scan_iter(match=f"{DEAD_PREFIX}*"):
                name = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
                if client.type(key) in (b"list", "list"):
                    raw = client.lrange(key, 0, scan - 1)  # kombu pushes on the left: the newest first
                    dead[name] = "\n".join(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                                           for v in raw)
    found = []
    for task_id in ids:
        entry = {"id": task_id, "unacked": task_id in unacked}
        held = [name for name, text in sorted(dead.items()) if task_id in text]
        if held:
            entry["dead_lettered"] = held[0]
        try:
            entry["state"] = app.AsyncResult(task_id).state
        except Exception as exc:  # pylint: disable=broad-exception-caught  # reported per task
            entry["error"] = f"{type(exc).__name__}: {exc}"
        found.append(entry)
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sturdy_agent")
    sub = parser.add_subparsers(dest="command", required=True)
    smoke_cmd = sub.add_parser("smoke", help="send a smoke job to each queue; print the answers as JSON")
    smoke_cmd.add_argument("--celery-app", required=True)
    smoke_cmd.add_argument("--timeout", type=float, default=30.0)
    smoke_cmd.add_argument("queues", nargs="+")
    rq_cmd = sub.add_parser("rq-smoke", help="send a smoke job through RQ to each queue (Redis URL: $RQ_REDIS_URL); "
                                             "print the answers as JSON")
    rq_cmd.add_argument("--timeout", type=float, default=30.0)
    rq_cmd.add_argument("queues", nargs="+")
    rq_stats_cmd = sub.add_parser("rq-stats", help="print depth, oldest job, workers and failed jobs of each RQ queue")
    rq_stats_cmd.add_argument("queues", nargs="+")
    rq_jobs_cmd = sub.add_parser("rq-jobs", help="print each RQ job's status and queue")
    rq_jobs_cmd.add_argument("ids", nargs="+")
    sub.add_parser("queue", help="print the smoke queue of this unit (from STURDY_APP/PROCESS/INSTANCE)")
    stats_cmd = sub.add_parser("stats", help="print depth, oldest message and consumers of each queue as JSON")
    stats_cmd.add_argument("--celery-app", required=True)
    stats_cmd.add_argument("--timeout", type=float, default=1.0, help="how long workers have to answer the ping")
    stats_cmd.add_argument("queues", nargs="+")
    health_cmd = sub.add_parser("health", help="ask every worker for its build, release, queues and running tasks")
    health_cmd.add_argument("--celery-app", required=True)
    health_cmd.add_argument("--timeout", type=float, default=1.0, help="how long workers have to answer")
    dead_cmd = sub.add_parser("dead", help="list, requeue or discard the dead letters of each queue")
    dead_cmd.add_argument("action", choices=["list", "requeue", "discard"])
    dead_cmd.add_argument("--celery-app", required=True)
    dead_cmd.add_argument("--limit", type=int, default=0, help="at most this many (list: 1000; else: all)")
    dead_cmd.add_argument("--confirm-discard", action="store_true", help="discard deletes them for good")
    dead_cmd.add_argument("queues", nargs="+", help="the live queues (their dead letters are in sturdy.dead.<queue>)")
    names_cmd = sub.add_parser("names", help="print the task names the app registers (no worker started) and, per "
                                             "queue, the task names of its waiting messages (Redis)")
    names_cmd.add_argument("--celery-app", required=True)
    names_cmd.add_argument("--scan", type=int, default=200000, help="read at most this many messages per queue")
    names_cmd.add_argument("queues", nargs="*")
    tasks_cmd = sub.add_parser("tasks", help="print each task's state and whether the broker holds it unacknowledged")
    tasks_cmd.add_argument("--celery-app", required=True)
    tasks_cmd.add_argument("ids", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "names":
        # One import of the app for both: the deploy asks this of every new release.
        print(json.dumps({"registered": registered(args.celery_app),
                          "transport": _celery_app(args.celery_app).connection_for_read().transport.driver_type,
                          "waiting": waiting_tasks(args.celery_app, args.queues, args.scan)}, sort_keys=True))
        return 0
    if args.command == "dead":
        print(json.dumps(dead_letters(args.celery_app, args.action, args.queues, args.limit, args.confirm_discard),
                         sort_keys=True))
        return 0
    if args.command == "tasks":
        print(json.dumps(task_states(args.celery_app, args.ids), sort_keys=True))
        return 0
    if args.command == "health":
        print(json.dumps(health_of(_celery_app(args.celery_app), args.timeout), sort_keys=True))
        return 0
    if args.command == "queue":
        print(own_smoke_queue() or "")
        return 0
    if args.command == "rq-jobs":
        print(json.dumps(rq_job_states(args.ids), sort_keys=True))
        return 0
    if args.command == "rq-stats":
        print(json.dumps(rq_queue_stats(args.queues), sort_keys=True))
        return 0
    if args.command == "rq-smoke":
        print(json.dumps(rq_smoke_client(args.queues, args.timeout), sort_keys=True))
        return 0
    if args.command == "stats":
        print(json.dumps(queue_stats(args.celery_app, args.queues, args.timeout), sort_keys=True))
        return 0
    print(json.dumps(smoke(args.celery_app, args.queues, args.timeout), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
else:
    activate()
