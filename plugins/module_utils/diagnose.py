# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Why a unit's main process died, from systemd's own record: pure logic over journal records and files.

The unit_diagnosis module gathers the inputs (journal records of PID 1 and of the unit, the cgroup's memory
events, the kernel log, the agent's records of running tasks, the tasks' state in the broker) and this module
turns them into a cause in words and the next step.
"""

from __future__ import annotations

import re

from ansible_collections.sturdy.workers.plugins.module_utils.app_status import UNIT_PROCESS_EXIT, exit_words
from ansible_collections.sturdy.workers.plugins.module_utils.names import socket_unit

TRACEBACK_START = "Traceback (most recent call last):"
# PID 1's own words about a unit (systemd's core/service.c), and what they mean for the operator.
PID1_SIGNS = (
    (re.compile(r"[Ww]atchdog timeout"), "watchdog"),
    (re.compile(r"State 'stop-sigterm' timed out|State 'stop-final-sigterm' timed out|stop operation timed out"),
     "stop-timeout"),
    (re.compile(r"[Ss]tart operation timed out|State 'start' timed out"), "start-timeout"),
    (re.compile(r"killed by the OOM killer|oom-kill"), "oom"),
    (re.compile(r"Start request repeated too quickly"), "start-limit"),
)
OOM_KERNEL = re.compile(r"oom-kill:|Out of memory|Memory cgroup out of memory|Killed process")


def main_exit(record: dict) -> bool:
    """Whether a PID 1 record is the exit of the unit's main process (ExecStart)."""
    return record.get("MESSAGE_ID") == UNIT_PROCESS_EXIT and record.get("COMMAND", "ExecStart") == "ExecStart"


def last_death(pid1: list[dict]) -> dict | None:
    """The last exit of the unit's main process (ExecStart) from PID 1's records, with its invocation."""
    found = None
    for record in pid1:
        if not main_exit(record):
            continue
        when = int(record.get("__REALTIME_TIMESTAMP", "0")) / 1e6
        if found is None or when >= found["time"]:
            code, status = str(record.get("EXIT_CODE", "")), str(record.get("EXIT_STATUS", ""))
            found = {"time": when, "code": code, "status": status, "words": exit_words(code, status),
                     "invocation": record.get("INVOCATION_ID") or record.get("_SYSTEMD_INVOCATION_ID"),
                     "clean": code == "exited" and status == "0"}
    return found


def last_failure(pid1: list[dict], props: dict) -> tuple[str | None, dict | None]:
    """The invocation that failed last, and its main process's exit (None when PID 1 recorded none for it).

    The latest of PID 1's exit records and its messages naming a timeout, watchdog, OOM kill or start limit: a main
    process a SIGTERM ended (a start timeout) leaves no exit record, and by the time anyone looks systemd may be
    starting the unit again under a new invocation. Failing both, the invocation systemd names now."""
    latest = None
    for record in pid1:
        invocation = record.get("INVOCATION_ID") or record.get("_SYSTEMD_INVOCATION_ID")
        if invocation and (main_exit(record) or any(pattern.search(str(record.get("MESSAGE", ""))) for pattern, dummy in PID1_SIGNS)):
            when = int(record.get("__REALTIME_TIMESTAMP", "0"))
            if latest is None or when >= latest[0]:
                latest = (when, invocation)
    invocation = latest[1] if latest else props.get("InvocationID") or None
    death = last_death(pid1)
    return invocation, death if death and death["invocation"] in (None, invocation) else None


def pid1_signs(pid1: list[dict], invocation: str | None) -> list[str]:
    """Signs of a timeout, watchdog, OOM kill or start limit in PID 1's messages about that invocation."""
    signs = []
    for record in pid1:
        if invocation and record.get("INVOCATION_ID") not in (None, invocation):
            continue
        message = str(record.get("MESSAGE", ""))
        for pattern, sign in PID1_SIGNS:
            if pattern.search(message) and sign not in signs:
                signs.append(sign)
    return signs


def traceback(lines: list[str]) -> list[str]:
    """The last Python traceback in the lines, from its first line to the exception line."""
    start = max((i for i, line in enumerate(lines) if TRACEBACK_START in line), default=None)
    if start is None:
        return []
    block = [lines[start]]
    for line in lines[start + 1:]:
        block.append(line)
        # Frames are indented; the exception line is the first one that is not.
        if line and not line.startswith((" ", "\t", "During handling")):
            break
    return block


def oom_events(memory_events: str | None) -> int:
    """oom_kill count from a cgroup's memory.events ("oom_kill 2")."""
    for line in (memory_events or "").splitlines():
        key, dummy, value = line.partition(" ")
        if key == "oom_kill":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


def kernel_oom(lines: list[str], unit: str) -> list[str]:
    """Kernel OOM lines that name the unit: the kernel's oom-kill: line names the victim's cgroup (task_memcg=, the
    unit's own or a container's path ending in it), on cgroup v1 and v2 alike. An OOM kill naming another cgroup
    killed a process of another unit (or another container on the same kernel): it does not explain this death."""
    return [line for line in lines if OOM_KERNEL.search(line) and unit in line]


def task_words(task: dict) -> str:
    """What became of a task that was running when its worker died (state from the result backend, and whether
    the broker still holds it unacknowledged)."""
    if "rq_status" in task and not task.get("error"):
        return rq_job_words(task)
    state = task.get("state")
    if task.get("dead_lettered"):
        return (f"dead-lettered: the agent moved it to {task['dead_lettered']} after its delivery ceiling "
                "(max_deliveries), and it runs again only when you requeue it (sturdy.workers.dead_letters)")
    if state == "SUCCESS":
        return "it ran again and succeeded (redelivered: task_acks_late did its job)"
    if state in ("FAILURE", "RETRY", "REVOKED"):
        return f"it ran again and ended in {state}"
    if state == "STARTED":
        return "it is running again"
    if task.get("unacked"):
        return ("not acknowledged: the broker holds it and hands it out again after the visibility timeout "
                "(nothing is lost; it runs again, so it must be idempotent)")
    if task.get("waiting"):
        return "it is back in its queue, waiting for a worker"
    if state == "PENDING":
        return ("no result, not in its queue and not held unacknowledged: lost, unless it has no result backend "
                "(a worker with task_acks_late off acknowledges a task before running it)")
    return f"its state could not be read ({task.get('error', 'no answer')})"


def rq_job_words(job: dict) -> str:
    """What became of an RQ job whose worker died: RQ does not run it again by itself."""
    status, queue = job.get("rq_status"), job.get("queue") or "<queue>"
    requeue = f"rq requeue --queue {queue} {job.get('id')} (from the release, with RQ_REDIS_URL)"
    if status == "finished":
        return "it ran to its end"
    if status == "failed":
        return (f"RQ put it in the failed job registry (a job whose work horse was killed is not run again). Next: "
                f"once the cause is fixed, {requeue}")
    if status == "started":
        return ("RQ still lists it as started: with its worker gone, RQ moves it to the failed job registry once its "
                f"heartbeat lapses, and does not run it again. Next: once it is there, {requeue}")
    if status in ("queued", "deferred", "scheduled"):
        return f"it is back in its queue ({status}), waiting for a worker"
    return "RQ has no record of it any more (its result expired)"


def cause(result: str, death: dict | None, signs: list[str], oom: bool, empty_log: bool, tb: list[str],
          settings: dict) -> tuple[str, str]:
    """(why it died, the next step), most specific first."""
    stop = settings.get("TimeoutStopUSec", "?")
    if oom or result == "oom-kill" or "oom" in signs:
        return ("the OOM killer killed it: the unit or the host ran out of memory",
                "find the task whose memory grows (the running task above); lower --concurrency, set "
                "--max-memory-per-child, or raise MemoryMax= / the host's memory")
    if result == "watchdog" or "watchdog" in signs:
        return ("it missed its watchdog (WatchdogSec=): its event loop hung, so systemd killed it (SIGABRT)",
                "look for a blocking call in the main process (a broker connection without timeout, a deadlock); "
                "the traceback SIGABRT printed is shown above")
    if "stop-timeout" in signs:
        return (f"a stop waited the whole stop timeout ({stop}) for running tasks and then systemd SIGKILLed it",
                "a task ran longer than max_task_runtime: raise sturdy_processes[].max_task_runtime (the stop timeout "
                "follows) or set task_time_limit below it")
    if "start-timeout" in signs:
        return ("it did not become ready within its start timeout (TimeoutStartSec=, no READY=1)",
                "read its last log lines above: a broker it cannot reach, a slow import; the agent sends READY=1 once "
                "the worker consumes")
    if result == "timeout":
        return ("it hit a start or stop timeout (TimeoutStartSec=/TimeoutStopSec=)",
                "read PID 1's messages (journalctl -u <unit>) for which one, and its last log lines above")
    if death and death["code"] in ("killed", "dumped"):
        words = f"it was {death['words'].split(' (')[0]}"
        if death["status"] == "9":
            words += (", and not by systemd's own stop: the OOM killer (outside its cgroup's view), a container or "
                      "cgroup memory limit, or someone's kill -9")
            if empty_log:
                words += "; its log ends without an error, which fits a SIGKILL"
        return (words, "check the host's memory (dmesg, the container's limit) and who else may kill processes")
    if tb:
        return (f"it exited ({death['words'] if death else result}) after a Python exception: {tb[-1].strip()}",
                "fix the error the traceback shows; a release that dies on start is rolled back by the deploy")
    if death and not death["clean"]:
        return (f"it {death['words']}", "read its last log lines above for the error it printed before exiting")
    if death:
        return ("it exited cleanly (status 0): a deliberate stop, or the program ended on its own",
                "nothing failed; if it should still run, start it (systemctl start) and check its command")
    if result == "start-limit-hit" or "start-limit" in signs:
        return ("systemd refused to start it again: it hit its start limit (StartLimitBurst= starts within "
                "StartLimitIntervalSec=, crashes and restarts alike), and no exit of its own is in the journal read",
                "find why it failed before (widen sturdy_diagnose_since, or journalctl -u <unit>), fix that, then "
                "systemctl reset-failed <unit> && systemctl start <unit>")
    if settings.get("ActiveState") == "active":
        return ("it has not died: it runs, and systemd recorded no exit of its main process in the journal that was "
                "read", "nothing to recover here; for an older death, widen the window (sturdy_diagnose_since)")
    return ("systemd has no record of its main process exiting in the journal that was read",
            "widen the window (sturdy_diagnose_since) or read journalctl -u <unit>")


DEPENDENCY_FAILED = re.compile(r"Dependency failed for")


def dependency_failed_at(pid1: list[dict]) -> float | None:
    """When PID 1 last refused to start the unit because a unit it requires (its listening socket) failed."""
    times = [int(r.get("__REALTIME_TIMESTAMP", "0")) / 1e6 for r in pid1
             if DEPENDENCY_FAILED.search(str(r.get("MESSAGE", "")))]
    return max(times) if times else None


def diagnosis(unit: str, props: dict, pid1: list[dict], output: list[dict], memory_events: str | None,
              kernel: list[str], tasks: list[dict], required: list[str] | None = None) -> dict:
    """Everything known about why `unit` last died, in words, with the next step. `required`: what PID 1 said about
    the units it requires (its listening socket), read when it refused to start it for them."""
    invocation, death = last_failure(pid1, props)
    signs = pid1_signs(pid1, invocation)
    refused = dependency_failed_at(pid1)
    if refused and (not death or refused > death["time"]):
        signs.append("dependency")
    # The dead invocation's lines up to its death (they reach the journal at most a moment after PID 1's record).
    until = death["time"] + 1 if death else float("inf")
    lines = [str(r.get("MESSAGE", "")) for r in output
             if (not invocation or r.get("_SYSTEMD_INVOCATION_ID") in (None, invocation))
             and int(r.get("__REALTIME_TIMESTAMP", "0")) / 1e6 <= until]
    tb = traceback(lines)
    tail = lines[-15:]
    errorish = re.compile(r"Traceback|Error|error|CRITICAL|Killed|Warm shutdown|exited|exception", re.I)
    empty_log = not tail or not any(errorish.search(line) for line in tail[-5:])
    ooms = kernel_oom(kernel, unit)
    oom = oom_events(memory_events) > 0 or bool(ooms)
    if "dependency" in signs:
        # The reason ("Failed to create listening socket (...): Address already in use") before the outcome.
        said = [m.strip().split(": ", 1)[-1] if m.strip().startswith(socket_unit(unit)) else m.strip()
                for m in required or [] if m.strip()]
        told = ([m for m in said if m.startswith("Failed to create")]
                or [m for m in said if "listening socket (" in m] or said)[-1:]
        why, step = ("systemd did not start it: a unit it requires failed to start" + (
            f" (its listening socket: {told[0]})" if told else " (its listening socket, from listen)"),
            "free the address (ss -ltnp shows which process holds it) or change sturdy_processes[].listen, then "
            f"systemctl start {unit}")
    else:
        why, step = cause(props.get("Result", ""), death, signs, oom, empty_log, tb, props)
    # The tasks of the invocation running now are not interrupted: its worker runs them.
    live = props.get("InvocationID") if props.get("ActiveState") in ("active", "reloading") else None
    current = [t for t in tasks if live and t.get("invocation") == live]
    interrupted = [t for t in tasks if (not invocation or t.get("invocation") in (None, invocation))
                   and t not in current]
    for t in interrupted:
        t["fate"] = task_words(t)
    return {
        "unit": unit,
        "state": props.get("ActiveState", "unknown"),
        "result": props.get("Result", ""),
        "restarts": int(props.get("NRestarts") or 0),
        "death": death,
        "signs": signs,
        "cause": why,
        "next": step,
        "traceback": tb,
        "log_tail": tail,
        "empty_log": empty_log,
        "oom": {"memory_events_oom_kill": oom_events(memory_events), "kernel": ooms[-3:]},
        "running_tasks": interrupted,
        "current_tasks": current,
    }


def summary(host: str, d: dict) -> list[str]:
    """Lines for the console."""
    lines = [f"{host} {d['unit']}: {d['state']} (Result={d['result'] or '-'}, NRestarts={d['restarts']})"]
    if d["death"]:
        lines.append(f"  last death: {d['death']['words'].split(' (')[0]} (invocation {d['death']['invocation'] or '?'})")
    lines.append(f"  why: {d['cause']}")
    for t in d["running_tasks"]:
        lines.append(f"  it was running {t.get('name')}[{t.get('id')}], started {t.get('ran', '?')}s before: {t['fate']}")
    for t in d.get("current_tasks", []):
        lines.append(f"  it is running {t.get('name')}[{t.get('id')}] now, for {t.get('running_for', '?')}s")
    if d["traceback"]:
        lines += ["  traceback:"] + [f"    {line}" for line in d["traceback"][-8:]]
    elif d["log_tail"]:
        lines += ["  its last log lines:"] + [f"    {line}" for line in d["log_tail"][-5:]]
    else:
        lines.append("  its log is empty")
    lines.append(f"  next: {d['next']}")
    return lines
