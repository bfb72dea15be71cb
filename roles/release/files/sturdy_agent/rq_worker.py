# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inside an RQ worker (STURDY_AGENT=rq, RQ 2): the instance's smoke queue first among its queues and the smoke job's
answer, its build in its registration hash, READY=1 once it listens, STOPPING=1 and a stop that loses no job, task
records and counts. Imported only in an RQ worker's process."""

from __future__ import annotations

import inspect
import os
import time

from .core import STATE, identity, loaded_build, notify, own_smoke_queue, paused_here, paused_status, unit_name
from .records import count_outcome, prune_task_records, record_task_end, record_task_start, task_record_path

# The longest blocking pop of an RQ worker: how long a stop waits for an idle worker to notice it.
RQ_POP_SECONDS = 1


def smoke_answer(token: str) -> dict:
    """The answer of the smoke job (sturdy_agent.rq_smoke), run by the work horse (its parent is the worker's main
    process)."""
    return {**identity(token, "pool", [], STATE.get("queues", []), STATE.get("main_pid", os.getppid())),
            "settings": {}}


def follow_pause(worker, keys: list[str]) -> list[str]:
    """The queue keys to pop from: only the instance's smoke queue while the app's pause marker names this process
    type (sturdy.workers.pause), all of them again once it is gone. Checked before every pop (at most RQ_POP_SECONDS
    apart); the job a pop took runs."""
    held, smoke = paused_here(), own_smoke_queue()
    smoke_key = f"{worker.queue_class.redis_queue_namespace_prefix}{smoke}" if smoke else None
    if held and smoke_key in keys:
        if not STATE.get("paused"):
            STATE["paused"] = True
            notify(f"STATUS={paused_status(held, [q for q in worker.queue_names() if q != smoke])}")
        return [smoke_key]
    if STATE.pop("paused", None):
        notify(f"STATUS=listening on {', '.join(worker.queue_names())}")
    return keys


def install() -> None:
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
        STATE.update(main_pid=os.getpid(), queues=self.queue_names(), rq_worker=self)
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
            worker = STATE.get("rq_worker")
            if worker is not None and getattr(worker, "_stop_requested", False):
                raise StopRequested()  # a stop asked for before the pop: take nothing more
            call = signature.bind(cls, *args, **kwargs)
            keys = call.arguments.get("queue_keys")
            if worker is not None and isinstance(keys, (list, tuple)):
                call.arguments["queue_keys"] = follow_pause(worker, list(keys))
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
