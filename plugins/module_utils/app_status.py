# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an app's processes are doing on one host, read from systemd, the journal and /proc: pure logic.

The app_status module runs the commands and reads the files; everything here takes their output, so it is
unit-tested without a host. Words are for the operator at 3 a.m.: what happened, in systemd's own terms.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import signal
import time
from typing import Callable

from ansible_collections.sturdy.workers.plugins.module_utils.adapters import (
    AdapterError,
    json_line,
    run_bounded,
    transient_argv,
)
from ansible_collections.sturdy.workers.plugins.module_utils.history import read as read_history
from ansible_collections.sturdy.workers.plugins.module_utils.names import CONSUMERS_EXPECTED_ENV, DEAD_PREFIX
from ansible_collections.sturdy.workers.plugins.module_utils.pause import read as pause_marker
from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import default_read, parse_show, parse_version

# systemd's catalog IDs (systemd/sd-messages.h), logged by PID 1 with UNIT= set.
UNIT_PROCESS_EXIT = "98e322203f7a4ed290d09fe03c09fe15"  # EXIT_CODE=, EXIT_STATUS=
UNIT_RESTART_SCHEDULED = "5eb03494b6584870a536b337290809b3"
JOURNAL_IDS = (UNIT_PROCESS_EXIT, UNIT_RESTART_SCHEDULED)

PROPERTIES = (
    "Id", "LoadState", "ActiveState", "SubState", "UnitFileState", "Result", "NRestarts", "MainPID",
    "ExecMainStartTimestampMonotonic", "ExecMainCode", "ExecMainStatus", "Environment",
)

# How long the agent may take to read an app's queues for the status: a broker that takes connections and never
# answers must not hold the status (or the deploy report) forever.
QUEUE_READ_SECONDS = 60

# siginfo si_code of the last main-process exit, as `systemctl show` prints ExecMainCode=.
CLD_EXITED, CLD_KILLED, CLD_DUMPED = 1, 2, 3

RESULTS = {
    "exit-code": "exited with a non-zero status",
    "signal": "was killed by a signal",
    "core-dump": "dumped core",
    "timeout": "hit a start or stop timeout (TimeoutStartSec=/TimeoutStopSec=)",
    "watchdog": "missed its watchdog (WatchdogSec=): its event loop hung",
    "oom-kill": "was killed by the OOM killer",
    "start-limit-hit": "failed too often in a row and systemd gave up (StartLimitBurst=)",
    "resources": "could not be started (a missing user, directory, file or credential)",
    "protocol": "broke the service protocol (for Type=notify: it exited before READY=1)",
    "exec-condition": "was skipped by ExecCondition=",
}


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_words(code: str, status: str) -> str:
    """EXIT_CODE=/EXIT_STATUS= of a journal record (or ExecMainCode=/ExecMainStatus=) in words."""
    try:
        number = int(status)
    except (TypeError, ValueError):
        number = None
    if code in ("killed", "dumped", str(CLD_KILLED), str(CLD_DUMPED)):
        name = signal_name(number) if number is not None else f"signal {status}"
        words = f"killed by {name}" if code in ("killed", str(CLD_KILLED)) else f"dumped core on {name}"
        if name == "SIGKILL":
            words += (" (not by systemd's stop: the OOM killer, a container or cgroup memory limit, or someone's"
                      " kill -9; an empty log before it fits that)")
        return words
    if code in ("exited", str(CLD_EXITED)):
        return "exited cleanly (status 0)" if number == 0 else f"exited with status {status}"
    return f"{code or '?'} {status or ''}".strip()


def parse_journal(text: str) -> list[dict]:
    """`journalctl -o json` lines into dicts (lines that are not JSON objects are skipped)."""
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def journal_by_unit(records: list[dict], now: float, window: float = 3600.0) -> dict[str, dict]:
    """Per unit: automatic restarts scheduled in the last `window` seconds, and its main process's last exit."""
    found: dict[str, dict] = {}
    for record in records:
        unit = record.get("UNIT")
        if not isinstance(unit, str):
            continue
        try:
            when = int(record.get("__REALTIME_TIMESTAMP", "0")) / 1e6
        except (TypeError, ValueError):
            when = 0.0
        entry = found.setdefault(unit, {"restarts_last_hour": 0, "last_exit": None})
        if record.get("MESSAGE_ID") == UNIT_RESTART_SCHEDULED and now - when <= window:
            entry["restarts_last_hour"] += 1
        elif record.get("MESSAGE_ID") == UNIT_PROCESS_EXIT and record.get("COMMAND", "ExecStart") == "ExecStart":
            if entry["last_exit"] is None or when >= entry["last_exit"]["time"]:
                code, status = str(record.get("EXIT_CODE", "")), str(record.get("EXIT_STATUS", ""))
                entry["last_exit"] = {"time": when, "code": code, "status": status,
                                      "words": exit_words(code, status), "clean": code == "exited" and status == "0"}
    return found


def build_of(path: str, releases: str) -> str | None:
    """The build ID a path under `releases`/<build>/... belongs to, or None."""
    prefix = releases.rstrip("/") + "/"
    if not path.startswith(prefix):
        return None
    build = path[len(prefix):].split("/", 1)[0]
    return build or None


def env_value(environment: str, key: str) -> str | None:
    """A variable from NUL-separated /proc/<pid>/environ or systemctl's space-separated Environment=."""
    for sep in ("\0", " "):
        for item in environment.split(sep):
            name, eq, value = item.partition("=")
            if eq and name == key:
                return value.strip('"')
    return None


def running_build(cwd: str | None, environ: str | None, releases: str) -> tuple[str | None, str]:
    """(build, where it was read) of a running process: its working directory's release wins, because that is
    the code it loaded; the STURDY_BUILD_ID the unit gave it is what it was started as."""
    if cwd:
        build = build_of(cwd, releases)
        if build:
            return build, "cwd"
    if environ:
        build = env_value(environ, "STURDY_BUILD_ID")
        if build:
            return build, "environment"
    return None, "unknown"


def duration_words(seconds: float | None) -> str:
    """45s, 12min, 3h 12min, 2d 4h."""
    if seconds is None:
        return "-"
    seconds = int(max(0, seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}min"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60}min"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


def instance_status(props: dict[str, str], journal: dict, proc: dict, releases: str, current_build: str | None,
                    monotonic_now: float) -> dict:
    """One instance: what systemd says, the build its code came from, its restarts and its last exit in words."""
    pid = props.get("MainPID", "0")
    started = int(props.get("ExecMainStartTimestampMonotonic") or 0) / 1e6
    active = props.get("ActiveState") == "active" and pid not in ("", "0")
    build, source = running_build(proc.get("cwd"), proc.get("environ"), releases) if active else (None, "not running")
    last = journal.get("last_exit")
    return {
        "unit": props.get("Id"),
        "state": props.get("ActiveState", "unknown"),
        "sub_state": props.get("SubState", ""),
        "result": props.get("Result", ""),
        "enabled": props.get("UnitFileState", ""),
        "loaded": props.get("LoadState", ""),
        "pid": int(pid) if active else None,
        "build": build,
        "build_source": source,
        "old_release": bool(active and build and current_build and build != current_build),
        "unit_build": env_value(props.get("Environment", ""), "STURDY_BUILD_ID"),
        "restarts": int(props.get("NRestarts") or 0),
        "restarts_last_hour": journal.get("restarts_last_hour", 0),
        "uptime": round(monotonic_now - started, 1) if active and started else None,
        "last_exit": last,
        "result_words": RESULTS.get(props.get("Result", ""), ""),
    }


def instance_problems(host: str, process: dict, inst: dict, declared: bool, current: str | None = None) -> list[str]:
    """What an operator must act on for one instance, each with the next step."""
    where = f"{host} {inst['unit']}"
    problems = []
    if inst["loaded"] == "not-found":
        problems.append(f"{where}: no unit file: deploy the app (sturdy.workers.deploy) to write it")
        return problems
    if inst["state"] == "deactivating" and not declared:
        # A surge instance told to stop after a restart (or one the deploy stopped): it finishes its running tasks.
        return problems
    if inst["state"] != "active":
        why = f"{inst['result']}: it {inst['result_words']}" if inst["result_words"] else inst["result"] or "?"
        last = f"; last exit: {inst['last_exit']['words']}" if inst["last_exit"] else ""
        verb = "is declared but " if declared else ""
        problems.append(f"{where} {verb}{inst['state']} ({why}{last}). Next: ansible-playbook sturdy.workers.diagnose "
                        f"-e sturdy_diagnose_unit={inst['unit']}")
    elif not declared:
        problems.append(f"{where} runs but is not declared (sturdy_processes[{process.get('name')}].instances): the "
                        "next deploy stops it; stop it now with systemctl disable --now")
    if inst["old_release"]:
        problems.append(f"{where} runs build {inst['build']} but current is {current}: it was not restarted after "
                        "the switch. Next: ansible-playbook sturdy.workers.restart")
    if inst["restarts"] and inst["restarts_last_hour"]:
        # NRestarts counts automatic restarts since the last deliberate start; the journal says when they were.
        last = inst["last_exit"]["words"] if inst["last_exit"] else "unknown"
        loop = "a crash loop: " if inst["restarts_last_hour"] >= 3 else ""
        problems.append(f"{where} died and was restarted by systemd {inst['restarts']} time(s) since it was started, "
                        f"{inst['restarts_last_hour']} in the last hour ({loop}last exit: {last}). Next: ansible-playbook "
                        f"sturdy.workers.diagnose -e sturdy_diagnose_unit={inst['unit']}")
    return problems


def host_status(plan: dict, show: list[dict], journal: dict[str, dict], procs: dict[str, dict],
                current_build: str | None, monotonic_now: float, host: str) -> dict:
    """Every process type and instance of the app on this host (declared ones, and stray instances systemd
    still has), with the problems found."""
    by_unit = {p.get("Id"): p for p in show}
    processes = []
    problems = []
    if current_build is None:
        problems.append(f"{host}: {plan['current']} does not point at a release: nothing was deployed here or the link "
                        "was removed. Next: ansible-playbook sturdy.workers.deploy")
    for proc in plan.get("processes", []):
        pattern = re.compile(proc["unit_pattern"])
        declared = list(proc["units"])
        extra = sorted((u for u in by_unit if pattern.match(u) and u not in declared
                        and by_unit[u].get("ActiveState") not in ("inactive", None)),
                       key=lambda u: (len(u), u))
        if proc.get("singleton"):
            # One host of the deployment runs it: here only when enabled or running (the fleet is checked as a whole
            # in the report: sturdy.workers.status_report).
            declared = [u for u in declared if by_unit.get(u, {}).get("UnitFileState") == "enabled"
                        or by_unit.get(u, {}).get("ActiveState") not in ("inactive", None)]
        instances = []
        for unit in declared + extra:
            props = by_unit.get(unit, {"Id": unit, "LoadState": "not-found", "ActiveState": "inactive"})
            inst = instance_status(props, journal.get(unit, {}), procs.get(unit, {}), plan["releases"], current_build,
                                   monotonic_now)
            inst["declared"] = unit in declared
            instances.append(inst)
            problems += instance_problems(host, proc, inst, unit in declared, current_build)
        processes.append({"name": proc["name"], "adapter": proc.get("adapter"), "queues": proc.get("queues", []),
                          "singleton": bool(proc.get("singleton")), "instances": instances})
    return {"host": host, "app": plan["app"], "current": current_build, "processes": processes, "problems": problems}


# Transient units (systemd-run: status's own queue reads, the migration) run from a release for a moment.
_TRANSIENT = re.compile(r"^run-[^/]*[.](service|scope)$")


def _release_build(arg: str, cwd: str | None, plan: dict, realpath: Callable[[str], str]) -> str | None:
    """The build whose release a command-line path (absolute, or relative to cwd) points into, through current."""
    if "/" not in arg:
        return None
    path = posixpath.normpath(arg if arg.startswith("/") else posixpath.join(cwd or "/", arg))
    current = plan["current"]
    if path == current or path.startswith(current + "/"):
        path = realpath(current) + path[len(current):]
    return build_of(path, plan["releases"])


def stray_processes(plan: dict, pids: list[int], read: Callable[[str], str | None],
                    readlink: Callable[[str], str | None], realpath: Callable[[str], str] = os.path.realpath,
                    ) -> list[dict]:
    """Processes running a release's program outside the app's units (started by hand, left behind by an old deploy
    tool): systemd neither restarts nor stops them, and a deploy does not replace their code. A process counts when
    its program or script (argv[0] or argv[1]) is in a release; a shell that only sits in one does not."""
    found = []
    for pid in pids:
        argv = (read(f"/proc/{pid}/cmdline") or "").split("\0")
        cwd = readlink(f"/proc/{pid}/cwd")
        build = next((b for b in (_release_build(a, cwd, plan, realpath) for a in argv[:2]) if b), None)
        if not build:
            continue
        lines = (read(f"/proc/{pid}/cgroup") or "").strip().splitlines()
        unit = lines[-1].rsplit("/", 1)[-1] if lines else ""
        if re.match(plan["instance_pattern"], unit) or _TRANSIENT.match(unit):
            continue
        found.append({"pid": pid, "build": build, "command": " ".join(argv).strip()[:200], "cgroup": unit})
    return found


def stray_problems(host: str, strays: list[dict], current: str | None) -> list[str]:
    """One problem per build the stray processes run, with their PIDs and the next step."""
    by_build: dict[str, list[dict]] = {}
    for proc in strays:
        by_build.setdefault(proc["build"], []).append(proc)
    problems = []
    for build, procs in sorted(by_build.items()):
        old = f"the old build {build}" if build != current else f"build {build}"
        pids = ", ".join(str(p["pid"]) for p in procs)
        problems.append(f"{host}: {len(procs)} process(es) run {old} from its release outside the app's units (pids "
                        f"{pids}: {procs[0]['command'][:80]}): systemd does not manage them and a deploy does not "
                        f"replace their code. Next: stop them (kill {procs[0]['pid']}, or how they were started); the "
                        "units run what was deployed")
    return problems


def list_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def read_proc(pid: int, read: Callable[[str], str | None], readlink: Callable[[str], str | None]) -> dict:
    return {"cwd": readlink(f"/proc/{pid}/cwd"), "environ": read(f"/proc/{pid}/environ")}


def current_build_of(current: str, releases: str, realpath: Callable[[str], str]) -> str | None:
    target = realpath(current)
    return build_of(target, releases) if target != current else None


def journal_argv(units: list[str], since: str = "-7d") -> list[str]:
    """One journalctl call for every unit's exits and scheduled restarts (same-field matches are ORed)."""
    argv = ["journalctl", "--no-pager", "-o", "json", f"--since={since}", "_PID=1"]
    argv += [f"MESSAGE_ID={m}" for m in JOURNAL_IDS]
    argv += [f"UNIT={u}" for u in units]
    return argv


def default_readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def queue_groups(plan: dict, only=None, adapters=("celery",)) -> list[dict]:
    """The app's Celery process types (or those of `adapters`), each with the queues it is the first to name (two
    process types may share one: a queue twice would be two identical metric series, which node_exporter refuses).
    `only`: just these."""
    found, seen = [], set()
    for proc in plan.get("processes", []):
        if proc.get("adapter") not in adapters or (proc.get("adapter") == "celery" and not proc.get("celery_app")):
            continue
        queues = [q for q in dict.fromkeys(proc.get("queues") or []) if q not in seen and (not only or q in only)]
        if queues:
            seen.update(queues)
            found.append({**proc, "queues": queues})
    return found


def queue_commands(plan: dict, release: str, timeout: float) -> list[tuple[dict, list[str]]]:
    """The agent's stats command for the app's Celery process types (depth, oldest, consumers, dead letters) and RQ
    ones (depth, oldest, consumers, failed jobs)."""
    python = f"{release}/venv/bin/python"
    return [(proc, [python, "-m", "sturdy_agent", "rq-stats", *proc["queues"]] if proc["adapter"] == "rq" else
             [python, "-m", "sturdy_agent", "stats", "--timeout", f"{timeout:g}", "--celery-app", proc["celery_app"],
              *proc["queues"]]) for proc in queue_groups(plan, adapters=("celery", "rq"))]


def parse_queue_stats(proc: dict, rc: int, out: str, err: str) -> list[dict]:
    """The agent's JSON answer, or one entry per queue saying why the queues could not be read."""
    if rc == 0:
        try:
            found = json_line(out, list)
        except AdapterError:
            pass
        else:
            rate = proc.get("rate_limit")
            for q in found if rate else []:
                # The declared rate is for the process type: how long its backlog takes to drain at most that fast.
                q.update(rate_limit=rate, drain_seconds=round((q.get("depth") or 0) / float(rate), 1))
            return found
    tail = " ".join((out + err).strip().splitlines()[-3:])[-400:]
    return [{"queue": q, "error": f"the agent could not read it (rc {rc}): {tail}"} for q in proc.get("queues", [])]


def queue_problems(queues: list[dict], age_limit: float) -> list[str]:
    """What is wrong with the queues, each with the next step."""
    problems = []
    for q in queues:
        name, depth = q.get("queue"), q.get("depth") or 0
        if q.get("error"):
            problems.append(f"queue {name}: {q['error']}. Next: check the broker and BROKER_URL in the app's secrets")
            continue
        oldest = f", the oldest waiting {duration_words(q['oldest_age'])}" if q.get("oldest_age") is not None else ""
        task = f" ({q['oldest_task']})" if q.get("oldest_task") else ""
        if q.get("paused"):
            # Paused on purpose (sturdy.workers.pause): no consumer and a growing backlog are what was asked for.
            pass
        elif depth and not q.get("consumers") and q.get("consumers_error"):
            problems.append(f"queue {name} has {depth} message(s) waiting{oldest}{task}; the workers could not be "
                            f"asked whether they consume it ({q['consumers_error']})")
        elif depth and not q.get("consumers"):
            problems.append(f"queue {name} has {depth} message(s) waiting{oldest}{task} and no worker consumes it. "
                            "Next: are the workers up (the instances above)? Do they listen to it (-Q and "
                            "sturdy_processes[].queues)?")
        if q.get("dead_letter_depth"):
            problems.append(f"queue {name} has {q['dead_letter_depth']} dead letter(s) in {DEAD_PREFIX}{name}: "
                            "messages its workers could not run (a worker died with them each time, a task this build "
                            "does not register, arguments the task cannot take). Next: ansible-playbook "
                            "sturdy.workers.dead_letters lists them with their reasons; fix the cause, then requeue "
                            "them (-e sturdy_dead_letters_action=requeue)")
        if q.get("failed_jobs"):
            problems.append(f"queue {name} has {q['failed_jobs']} job(s) in RQ's failed job registry: jobs that raised, "
                            "timed out or whose work horse was killed. Next: rq info and the workers' journal say "
                            f"why; fix the cause, then rq requeue --queue {name} --all (from the release, with "
                            "RQ_REDIS_URL)")
        if (q.get("oldest_age") is not None and q["oldest_age"] > age_limit and q.get("consumers")
                and not q.get("paused")):
            waited = (f"queue {name}: the oldest message{task} has waited {duration_words(q['oldest_age'])} "
                      f"(more than {duration_words(age_limit)}) with {depth} waiting and "
                      f"{len(q.get('consumers') or [])} consumer(s)")
            if q.get("rate_limit"):
                problems.append(f"{waited}: at the declared rate_limit of {q['rate_limit']:g}/s it drains in "
                                f"{duration_words(q['drain_seconds'])} at the soonest. Next: raise "
                                "sturdy_processes[].rate_limit if what the tasks use can take more")
            else:
                problems.append(f"{waited}: the workers do not keep up. Next: more instances "
                                "(sturdy_processes[].instances), or find the slow task in the workers' logs")
    return problems


def list_units_argv(app: str) -> list[str]:
    """systemctl's list of every instance unit of the app it knows, loaded or not, declared or not."""
    return ["systemctl", "list-units", "--all", "--plain", "--no-legend", "--type=service", f"{app}-*@*.service"]


def app_units(plan: dict, listed: str) -> list[str]:
    """The declared instance units, then the others list_units_argv() found (stray instances systemd still has)."""
    declared = [u for proc in plan.get("processes", []) for u in proc["units"]]
    return list(dict.fromkeys(declared + [line.split()[0] for line in listed.splitlines() if line.strip()]))


class CollectError(Exception):
    """A command every reading needs failed: the host cannot be read."""


def collect(plan: dict, host: str, run: Callable[[list[str]], tuple[int, str, str]], queues: bool = True,
            queue_timeout: float = 1.0, journal_since: str = "-7d", realpath: Callable[[str], str] = os.path.realpath,
            read: Callable[[str], str | None] = default_read,
            readlink: Callable[[str], str | None] = default_readlink,
            pids: Callable[[], list[int]] = list_pids, consumers: int = 0) -> dict:
    """Everything app_status and the metrics collector report for one host. `run(argv)` runs systemctl, journalctl
    or systemd-run (argv[0]) and returns (rc, stdout, stderr). `consumers`: how many Celery workers should answer for
    their queues (the queue read stops waiting once they did), or 0 (it waits `queue_timeout`)."""
    def checked(argv):
        rc, out, err = run(argv)
        if rc != 0:
            raise CollectError(f"{' '.join(argv[:3])} ... failed (rc {rc}): {err.strip()[-500:]}")
        return out

    version = parse_version(checked(["systemctl", "--version"]))
    units = app_units(plan, checked(list_units_argv(plan["app"])))
    show = parse_show(checked(["systemctl", "show", "--property=" + ",".join(PROPERTIES), "--", *units])) if units else []
    monotonic_now, now = time.monotonic(), time.time()
    # journalctl exits 1 when nothing matches on some versions: an empty journal is an answer, not an error.
    journal = journal_by_unit(parse_journal(run(journal_argv(units, journal_since))[1]), now) if units else {}
    procs = {}
    for props in show:
        pid = props.get("MainPID", "0")
        if props.get("ActiveState") == "active" and pid not in ("", "0"):
            procs[props.get("Id")] = read_proc(int(pid), read, readlink)
    current = current_build_of(plan["current"], plan["releases"], realpath)
    result = host_status(plan, show, journal, procs, current, monotonic_now, host)
    result["strays"] = stray_processes(plan, pids(), read, readlink, realpath)
    result["problems"] += stray_problems(host, result["strays"], current)
    result["systemd_version"] = version
    # The live release (a build and its config: <build>, or <build>~<n> for another config of it).
    live = readlink(f"{(plan.get('secrets') or {}).get('directory') or '/etc/' + plan['app']}/current")
    result["release"] = posixpath.basename(live) if live else None
    # The maintenance lock (sturdy.workers.lock): who, since when, why; deploys are refused while it is held.
    try:
        held = json.loads(read(plan["maintenance"]) or "null") if plan.get("maintenance") else None
    except ValueError:
        held = {"message": f"{plan['maintenance']} cannot be read as JSON"}
    result["maintenance"] = held if isinstance(held, dict) else None
    # The pause (sturdy.workers.pause): the workers of the process types it names take no message, on purpose.
    paused = pause_marker(plan["paused"]) if plan.get("paused") else None
    result["paused"] = paused
    # The last run recorded here (a deploy, rollback or restart; module_utils/history.py).
    last = read_history(plan["history"], 1) if plan.get("history") else []
    result["last_run"] = last[-1] if last else None
    result["queues"] = []
    if queues and current:
        release = realpath(plan["current"])
        for proc, argv in queue_commands(plan, release, queue_timeout):
            environment = {**proc.get("environment", {}), **({CONSUMERS_EXPECTED_ENV: consumers} if consumers else {})}
            cmd = transient_argv(proc["user"], proc["group"], release, plan.get("secrets", {}).get("directives", []),
                                 environment, argv)
            found = parse_queue_stats(proc, *run_bounded(run, cmd, QUEUE_READ_SECONDS))
            if paused and (not paused.get("processes") or proc["name"] in paused["processes"]):
                for q in found:
                    q["paused"] = True
            result["queues"] += found
    return result
