# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runs of an app on a host: one JSON line per deploy, rollback and restart, appended when it ends.

Append-only: a line is written with one write() on a file opened O_APPEND, never rewritten; a line a crash cut short
is skipped when read. Read from the end, so a history of years costs what its last lines cost."""

from __future__ import annotations

import json
import os
import time

# What a line holds; anything else an entry carries is dropped (a line stays one readable line).
FIELDS = ("run", "kind", "host", "who", "awx_user", "awx_job", "started", "finished", "from", "to", "result",
          "summary", "units_started", "units_stopped")
# A summary longer than this is cut: the report file keeps the whole run.
SUMMARY_CHARS = 400


def entry_line(entry: dict, now: float | None = None) -> bytes:
    """The line `entry` is recorded as: its known fields, `finished` defaulting to now."""
    line = {k: entry.get(k) for k in FIELDS if entry.get(k) not in (None, "", [])}
    line.setdefault("finished", round(time.time() if now is None else now, 3))
    for k in ("started", "finished"):
        if k in line:
            line[k] = round(float(line[k]), 3)
    summary = " ".join(str(line.get("summary", "")).split())
    if len(summary) > SUMMARY_CHARS:
        summary = summary[:SUMMARY_CHARS - 1] + "…"
    if summary:
        line["summary"] = summary
    return (json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n").encode()


def append(path: str, entry: dict, check: bool = False) -> bool:
    """Append `entry` to the history file `path` (created 0644, readable by the status and history plays)."""
    if check or not entry or not os.path.isdir(os.path.dirname(path)):
        return False
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, entry_line(entry))
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def read(path: str, last: int = 20, chunk: int = 65536) -> list[dict]:
    """The last `last` entries of the history file, oldest first; none when it does not exist."""
    if last <= 0:
        return []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return []
    try:
        end = os.fstat(fd).st_size
        data = b""
        # Read back from the end until enough whole lines are in hand (one more than asked: the first may be cut).
        while end > 0 and data.count(b"\n") <= last:
            start = max(0, end - chunk)
            data = os.pread(fd, end - start, start) + data
            end = start
    finally:
        os.close(fd)
    lines = data.split(b"\n")
    if end > 0:
        lines = lines[1:]
    out = []
    for raw in lines:
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out[-last:]


def _stamp(epoch) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(epoch)))


def merge(entries_by_host: dict, hosts: list | None = None) -> list[dict]:
    """The runs in the hosts' entries, newest first: each with its hosts, results, releases and when it ran.

    `hosts` are the hosts that were read (default: those in `entries_by_host`); a run seen on some of them only says
    which (`missing`)."""
    hosts = sorted(hosts if hosts is not None else entries_by_host)
    runs: dict[str, dict] = {}
    for host in sorted(entries_by_host):
        for e in entries_by_host[host] or []:
            if not isinstance(e, dict):
                continue
            key = e.get("run") or f"{host}:{e.get('finished')}"
            run = runs.setdefault(key, {"run": e.get("run") or "", "kind": e.get("kind") or "?", "hosts": {},
                                        "who": e.get("who") or "", "awx_user": e.get("awx_user") or "",
                                        "awx_job": e.get("awx_job") or "", "summary": e.get("summary") or "",
                                        "started": e.get("started"), "finished": e.get("finished")})
            run["hosts"][e.get("host") or host] = e
            for k, pick in (("started", min), ("finished", max)):
                if e.get(k) is not None:
                    run[k] = e[k] if run[k] is None else pick(float(run[k]), float(e[k]))
    for run in runs.values():
        run["missing"] = [h for h in hosts if h not in run["hosts"]]
    return sorted(runs.values(), key=lambda r: float(r["finished"] or r["started"] or 0), reverse=True)


def _by_value(run: dict, value) -> str:
    """One value if every host of the run has it, else each value with its hosts."""
    seen: dict[str, list[str]] = {}
    for host, e in sorted(run["hosts"].items()):
        seen.setdefault(value(e), []).append(host)
    if len(seen) == 1:
        return next(iter(seen))
    return "; ".join(f"{v} on {', '.join(h)}" for v, h in seen.items())


def kind(run: dict) -> str:
    """The run's kind; a deploy that kept every host's build and made a new release of its config is `config`, and
    `scale` with the instances it started and stopped (the way to scale: change `instances`, deploy the live build)."""
    entries = list(run["hosts"].values())
    if run["kind"] != "deploy" or not entries or not all(
            e.get("from") and e.get("to") and e["from"] != e["to"]
            and e["from"].split("~")[0] == e["to"].split("~")[0] for e in entries):
        return run["kind"]
    started = sum(len(e.get("units_started") or []) for e in entries)
    stopped = sum(len(e.get("units_stopped") or []) for e in entries)
    if not started and not stopped:
        return "config"
    return "scale (" + ", ".join(f"{n} instance(s) {what}" for n, what in ((started, "started"), (stopped, "stopped"))
                                 if n) + ")"


def describe(run: dict) -> str:
    """One line: when it ended, kind, releases, result, duration, who, its hosts, the summary."""
    took = ""
    if run.get("started") is not None and run.get("finished") is not None:
        took = f" in {max(0, float(run['finished']) - float(run['started'])):.0f}s"
    who = run.get("who") or "?"
    if run.get("awx_job") or run.get("awx_user"):
        who += f" (AWX job {run.get('awx_job') or '?'} by {run.get('awx_user') or '?'})"
    where = f"{len(run['hosts'])} host(s)"
    if run.get("missing"):
        where = f"ONLY on {', '.join(sorted(run['hosts']))} (not on {', '.join(run['missing'])})"
    moved = _by_value(run, lambda e: f"{e.get('from') or '(none)'} -> {e.get('to') or '(none)'}")
    result = _by_value(run, lambda e: e.get("result") or "unknown")
    stamp = _stamp(run["finished"]) if run.get("finished") is not None else "(no time)"
    line = f"{stamp}  {kind(run)} {moved}: {result}{took}, by {who}, {where}"
    return line + (f" - {run['summary']}" if run.get("summary") else "")
