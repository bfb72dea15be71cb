# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling restart loop: one unit at a time, each ready and stable before the next.

Everything that touches the host (systemctl, journalctl, an HTTP readiness URL, the clock) comes in through
`Host`, so the loop is unit-tested without systemd.
"""

from __future__ import annotations

import time
from typing import Callable

from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import (
    WATCH_PROPERTIES,
    crash_signs,
    parse_show,
    timespan_seconds,
)

POLL = 0.5
# When a restart's stop began (the old process left active) and ended (it entered inactive): how long the stop waited
# for running tasks under a warm shutdown.
STOP_PROPERTIES = ("ActiveExitTimestampMonotonic", "InactiveEnterTimestampMonotonic")
# A stop that lasted its whole TimeoutStopSec= ended in a SIGKILL: the tasks still running were killed, not finished.
STOP_TIMEOUT = "TimeoutStopUSec"
SHOWN = WATCH_PROPERTIES + STOP_PROPERTIES + (STOP_TIMEOUT,)
# Marks of systemd's own record of an exit, which journald may write after the process's last words.
EXIT_MARKS = ("Main process exited", "Failed with result")


class RolloutError(Exception):
    """A unit that did not come up, or did not stay up; carries what the caller reports."""

    def __init__(self, msg: str, failed_unit: str, journal: list[str], restarted: list[dict]):
        super().__init__(msg)
        self.msg, self.failed_unit, self.journal, self.restarted = msg, failed_unit, journal, restarted


class Host:
    """What the loop needs from the host; `run(argv) -> (rc, out, err)`, `http_ok(url) -> bool`."""

    def __init__(self, run: Callable[[list], tuple], http_ok: Callable[[str], bool],
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep):
        self.run, self.http_ok, self.clock, self.wall, self.sleep = run, http_ok, clock, wall, sleep

    def show(self, name: str) -> dict:
        rc, out, err = self.run(["systemctl", "show", "--property=" + ",".join(SHOWN), "--", name])
        if rc != 0:
            raise RuntimeError(f"systemctl show {name} failed (rc {rc}): {err.strip()}")
        return (parse_show(out) or [{}])[0]

    def journal(self, name: str, since: float, lines: int) -> list[str]:
        """The unit's newest `lines` journal lines since `since`, once systemd's record of the exit is in (up to
        5 s: the process's last words reach journald through a pipe and may come after it)."""
        out, rc = "", 1
        for attempt in range(10):
            self.run(["journalctl", "--sync"])
            # Everything since the restart, cut here: with --since, journalctl -n gives the first lines, not the last.
            rc, out, dummy = self.run(["journalctl", "--no-pager", "--quiet", "-o", "short-iso", "-u", name,
                                       "--since", f"@{int(since) - 1}"])
            if rc != 0 or attempt == 9 or any(mark in out for mark in EXIT_MARKS):
                break
            self.sleep(POLL)
        return out.splitlines()[-lines:] if rc == 0 else []


def restart_one(host: Host, unit: dict, settle: float, ready_timeout: float) -> tuple[dict, float, str | None]:
    """Restart one unit and watch it; (the unit's state when it came up, seconds until ready, why it is not stable)."""
    name = unit["name"]
    started = host.clock()
    host.run(["systemctl", "reset-failed", "--", name])
    rc, dummy, err = host.run(["systemctl", "restart", "--", name])
    if rc != 0:
        return {}, 0.0, f"the restart failed ({err.strip() or 'rc ' + str(rc)})"
    now = host.show(name)
    if unit.get("http"):
        deadline = host.clock() + ready_timeout
        while not host.http_ok(unit["http"]):
            if host.clock() > deadline:
                return now, 0.0, f"{unit['http']} did not answer 2xx within {ready_timeout:.0f}s"
            why = crash_signs(now, host.show(name))
            if why:
                return now, 0.0, why
            host.sleep(POLL)
    ready = host.clock() - started
    settle_until = host.clock() + settle
    while True:
        why = crash_signs(now, host.show(name))
        if why or host.clock() >= settle_until:
            return now, ready, why
        host.sleep(POLL)


def stop_seconds(state: dict) -> float | None:
    """How long the last stop took (seconds), from a unit's state right after its restart; None when not told."""
    try:
        began, ended = (int(state.get(key) or 0) for key in STOP_PROPERTIES)
    except ValueError:
        return None
    return round((ended - began) / 1e6, 2) if 0 < began <= ended else None


def stop_timed_out(before: dict, stopped: float | None) -> bool:
    """Whether a stop that took `stopped` seconds used up the TimeoutStopSec= the unit had (`before` its restart),
    so systemd SIGKILLed what was still running."""
    timeout = timespan_seconds(before.get(STOP_TIMEOUT))
    return bool(stopped is not None and timeout and stopped >= timeout - 0.05)


def roll(host: Host, units: list, settle: float = 5, ready_timeout: float = 60, journal_lines: int = 25) -> list[dict]:
    """Restart `units` in order, each ready (its restart job, then its readiness URL) and stable over `settle`
    seconds before the next. Raises RolloutError at the first one that is not, naming the untouched rest."""
    units = [u if isinstance(u, dict) else {"name": str(u)} for u in units]
    restarted: list[dict] = []
    for index, unit in enumerate(units):
        name = unit["name"]
        before = host.show(name)
        since, started = host.wall(), host.clock()
        now, ready, why = restart_one(host, unit, settle, ready_timeout)
        if why:
            journal = host.journal(name, since, journal_lines)
            rest = [u["name"] for u in units[index + 1:]]
            raise RolloutError(
                f"{name} did not come up on the new code: {why}. "
                + (f"Not restarted, still on the code they ran: {', '.join(rest)}. " if rest else "")
                + f"Last log lines ({len(journal)}):\n" + "\n".join(journal),
                name, journal, restarted)
        stopped = stop_seconds(now)
        restarted.append({
            "name": name,
            "seconds": round(host.clock() - started, 2),
            "ready_seconds": round(ready, 2),
            "stop_seconds": stopped,
            "stop_timed_out": stop_timed_out(before, stopped),
            "before": {k: before.get(k) for k in ("InvocationID", "MainPID", "NRestarts")},
            "after": {k: now.get(k) for k in ("InvocationID", "MainPID", "NRestarts")},
        })
    return restarted
