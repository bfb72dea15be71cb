# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inside a worker: a record of the task each process runs, left behind when it is killed (what a diagnosis reads),
and a count of finished tasks by build and outcome (what the metrics collector reads). Standard library only."""

from __future__ import annotations

import json
import os
import time

from .core import STATE, loaded_build
from .names import RQ_SMOKE_JOB, SMOKE_TASK, TASK_COUNTS, TASK_RECORDS

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
    if "build" not in STATE:
        release, STATE["build"] = loaded_build()
        STATE["build"] = STATE["build"] or "unknown"
        STATE["releases"] = os.path.dirname(release) if release else None
    releases = STATE["releases"]
    try:
        count_task(path, STATE["build"], outcome,
                   (lambda b: os.path.isdir(os.path.join(releases, b))) if releases else None)
    except OSError:
        pass
