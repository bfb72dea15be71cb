# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling restart loop: per process type, surge instances first, then batches, each ready and stable before
the next.

Everything that touches the host (systemctl, journalctl, an HTTP readiness URL, the clock) comes in through
`Host`, so the loop is unit-tested without systemd.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from ansible_collections.sturdy.workers.plugins.module_utils.names import socket_unit
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
EXIT_MARKS = ("Main process exited", "Failed with result", "failed with result 'dependency'")


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
            # With the socket of a service that listens (sturdy_processes[].listen): why it could not bind.
            sockets = ["-u", socket_unit(name)] if name.endswith(".service") else []
            rc, out, dummy = self.run(["journalctl", "--no-pager", "--quiet", "-o", "short-iso", "-u", name, *sockets,
                                       "--since", f"@{int(since) - 1}"])
            if rc != 0 or attempt == 9 or any(mark in out for mark in EXIT_MARKS):
                break
            self.sleep(POLL)
        return out.splitlines()[-lines:] if rc == 0 else []


def bring_up(host: Host, verb: str, units: list[dict], settle: float,
             ready_timeout: float) -> tuple[dict, dict, str | None, str | None]:
    """`systemctl <verb>` every unit of `units` in one call (systemd runs their jobs side by side and returns when
    each is done), then waits for their readiness URLs and watches them all over `settle` seconds.

    Returns (each unit's state when it came up, seconds until each was ready, the first unit that is not ready and
    stable, why)."""
    names = [u["name"] for u in units]
    started = host.clock()
    # A deliberate start counts toward StartLimitBurst= like a crash; a unit never started answers "not loaded".
    host.run(["systemctl", "reset-failed", "--", *names])
    rc, dummy, err = host.run(["systemctl", verb, "--", *names])
    now = {name: host.show(name) for name in names}
    if rc != 0:
        bad = next((n for n in names if now[n].get("ActiveState") != "active"), names[0])
        return now, {}, bad, f"the {verb} failed ({err.strip() or 'rc ' + str(rc)})"
    ready = {u["name"]: host.clock() - started for u in units if not u.get("http")}
    waiting = [u for u in units if u.get("http")]
    deadline = host.clock() + ready_timeout
    while waiting:
        for unit in list(waiting):
            if host.http_ok(unit["http"]):
                ready[unit["name"]] = host.clock() - started
                waiting.remove(unit)
        if not waiting:
            break
        for unit in waiting:
            why = crash_signs(now[unit["name"]], host.show(unit["name"]))
            if why:
                return now, ready, unit["name"], why
        if host.clock() > deadline:
            return now, ready, waiting[0]["name"], f"{waiting[0]['http']} did not answer 2xx within {ready_timeout:.0f}s"
        host.sleep(POLL)
    bad, why = watch(host, {name: now[name] for name in names}, host.clock() + settle)
    return now, ready, bad, why


def watch(host: Host, started: dict[str, dict], until: float) -> tuple[str | None, str | None]:
    """Watch units (name -> their state when they came up) until the clock reaches `until`, at least once: the first
    that is not stable and why, or (None, None)."""
    while True:
        # The last look at every unit begins at or after `until`: a crash just before it is not missed.
        last = host.clock() >= until
        for name, state in started.items():
            why = crash_signs(state, host.show(name))
            if why:
                return name, why
        if last:
            return None, None
        host.sleep(POLL)


def finish_settle(host: Host, settling: dict, journal_lines: int = 25) -> None:
    """The rest of a settle watch that roll(defer_settle=True) left to its caller (`settling`: {until, since, units:
    name -> state when it came up}), watched while the caller did other work; raises RolloutError at an instance that
    did not stay up."""
    units = settling.get("units") or {}
    if not units:
        return
    bad, why = watch(host, units, float(settling.get("until") or 0))
    if bad:
        _fail(host, f"{bad} came up on the new code, then did not stay up: {why}", bad,
              float(settling.get("since") or host.wall()), [], journal_lines, [])


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


def batches(units: list, size: int) -> list[list]:
    """`units` cut into runs of `size` (at least 1), in order."""
    size = max(1, int(size))
    return [units[i:i + size] for i in range(0, len(units), size)]


def spec(unit) -> dict:
    """A unit as the loop takes it: a name, or a dictionary with `name` (and `http`)."""
    return unit if isinstance(unit, dict) else {"name": str(unit)}


def as_groups(units: list | None = None, groups: list | None = None, only: list | None = None) -> list[dict]:
    """The process types to roll, each {units, surge, max_unavailable}; plain `units` are one type, one at a time
    without a surge. With `only`, units outside it are left alone, and a type with none left is skipped whole."""
    if groups is None:
        groups = [{"units": units or []}]
    kept = []
    for group in groups:
        members = [spec(u) for u in group.get("units") or [] if only is None or spec(u)["name"] in only]
        if members:
            most = group.get("max_unavailable")
            kept.append({"units": members, "surge": [spec(u) for u in group.get("surge") or []],
                         "max_unavailable": 1 if most is None else int(most)})
    return kept


@dataclass
class Window:
    """A restarted unit's settle window: its state once up, when the window ends (host.clock()), when its restart
    began (host.wall(), for the journal) and the number of the batch it was restarted in."""

    state: dict
    until: float
    since: float
    batch: int


def roll(host: Host, units: list | None = None, settle: float = 5, ready_timeout: float = 60, journal_lines: int = 25,
         groups: list | None = None, only: list | None = None, defer_settle: bool = False,
         overlap_settle: bool = True) -> dict:
    """Restart the units of each process type in turn (`groups`, or `units` as one type restarted one at a time).

    A type with surge units starts them first, on the new code, and proves them ready and stable before any of its
    running instances is stopped; then its instances restart in batches of len(surge) + max_unavailable, each batch
    ready and stable before the next, so no fewer than instances - max_unavailable consume at any time. Once the last
    batch is stable the surge units are told to stop (a warm shutdown: they finish their running tasks and exit
    without the deploy waiting on them).

    With `overlap_settle`, a batch after the type's first counts as back once ready: the next one restarts while
    its settle window runs, and it is checked after every later restart and watched to the end of its window before
    the type's surge units stop and before the loop returns (a unit that does not stay up still stops the rollout,
    naming it, but the batches restarted meanwhile run the new code too). The first batch (or the surge units) is
    watched to the end of its window before any other restarts, so a build that dies soon after it is ready is
    caught while the rest run the old one, and a host's restart takes the first window and a start per batch,
    not a window per batch.

    With `defer_settle`, the last batch (with `overlap_settle`, every batch still in its window) is not watched here
    once ready, unless its type has surge instances (they stop only after it is stable): it is returned as
    `settling` ({until, since, units}) for the caller to finish with finish_settle() after other work (the
    deploy's smoke jobs), so the watch overlaps that work.

    Returns {restarted, surge, settling}. Raises RolloutError at the first unit that is not ready and stable, naming
    the untouched rest; surge units are told to stop then too."""
    plan = as_groups(units, groups, only)
    restarted: list[dict] = []
    surged: list[dict] = []
    # Units restarted whose settle window still runs, by name.
    windows: dict[str, Window] = {}
    batch_count = 0

    def check_windows(rest: list[str], surge: list[dict], until: float | None = None) -> None:
        """Every unit in its window once (until=None), or watched until `until`; a unit that did not stay up stops
        the rollout. A window is closed only once a look began at or after its end."""
        if not windows:
            return
        began = host.clock()
        bad, why = watch(host, {n: w.state for n, w in windows.items()}, began if until is None else until)
        if bad:
            _drain(host, surge)
            _fail(host, f"{bad} came up on the new code, then did not stay up: {why}"
                        + (" (the units restarted after it while it was watched run the new code too)"
                           if windows[bad].batch < batch_count else ""),
                  bad, windows[bad].since, rest, journal_lines, restarted)
        # A watch to `until` looked last at or after it.
        closed = began if until is None else max(began, until)
        for name in [n for n, w in windows.items() if w.until <= closed]:
            del windows[name]

    for index, group in enumerate(plan):
        later = [u["name"] for g in plan[index + 1:] for u in g["units"]]
        surge = group["surge"]
        if surge:
            since = host.wall()
            now, ready, bad, why = bring_up(host, "start", surge, settle, ready_timeout)
            if bad:
                _drain(host, surge)
                _fail(host, f"{bad} (a surge instance, started beside the running ones before any of them was "
                            f"stopped) did not come up on the new code: {why}. No running instance of its process "
                            "type was stopped; the surge instances are told to stop",
                      bad, since, [u["name"] for u in group["units"]] + later, journal_lines, restarted)
            surged += [{"name": n, "ready_seconds": round(ready.get(n, 0.0), 2)} for n in now]
        runs = batches(group["units"], len(surge) + group["max_unavailable"])
        for number, batch in enumerate(runs):
            rest = [u["name"] for b in runs[number + 1:] for u in b] + later
            before = {u["name"]: host.show(u["name"]) for u in batch}
            since, started = host.wall(), host.clock()
            last = index == len(plan) - 1 and number == len(runs) - 1
            # The first batch of a type without surge instances proves the build stays up while the rest still run
            # the old one: it is watched to the end of its window even with overlap_settle (the surge instances do
            # that for a type that has them).
            watched_later = (overlap_settle and (bool(surge) or number > 0)) or (defer_settle and not surge and last)
            now, ready, bad, why = bring_up(host, "restart", batch, 0 if watched_later else settle, ready_timeout)
            if bad:
                _drain(host, surge)
                _fail(host, f"{bad} did not come up on the new code: {why}"
                            + (f" (restarted together with {', '.join(n for n in before if n != bad)})"
                               if len(batch) > 1 else ""),
                      bad, since, rest, journal_lines, restarted)
            for name, state in before.items():
                stopped = stop_seconds(now[name])
                restarted.append({
                    "name": name,
                    "seconds": round(host.clock() - started, 2),
                    "ready_seconds": round(ready.get(name, 0.0), 2),
                    "stop_seconds": stopped,
                    "stop_timed_out": stop_timed_out(state, stopped),
                    "before": {k: state.get(k) for k in ("InvocationID", "MainPID", "NRestarts")},
                    "after": {k: now[name].get(k) for k in ("InvocationID", "MainPID", "NRestarts")},
                })
            batch_count += 1
            # The batches restarted before this one, still in their windows, while it restarted.
            check_windows(rest, surge)
            if watched_later:
                windows.update({n: Window({k: now[n].get(k) for k in WATCH_PROPERTIES}, host.clock() + settle, since,
                                          batch_count) for n in now})
        if surge or not defer_settle:
            # Surge instances stop only once every instance of their type is stable.
            check_windows(later, surge, max((w.until for w in windows.values()), default=None))
        _drain(host, surge)
    # Without defer_settle every group ended with its windows watched: what is left goes to the caller.
    settling = {"until": max(w.until for w in windows.values()), "since": min(w.since for w in windows.values()),
                "units": {n: w.state for n, w in windows.items()}} if windows else {}
    return {"restarted": restarted, "surge": surged, "settling": settling}


def _drain(host: Host, units: list[dict]) -> None:
    """Tell units to stop (SIGTERM, their warm shutdown) without waiting: they finish what they run and exit."""
    if units:
        host.run(["systemctl", "stop", "--no-block", "--", *(u["name"] for u in units)])


def _fail(host: Host, what: str, name: str, since: float, rest: list[str], lines: int, restarted: list[dict]):
    journal = host.journal(name, since, lines)
    raise RolloutError(
        what + ". "
        + (f"Not restarted, still on the code they ran: {', '.join(rest)}. " if rest else "")
        + f"Last log lines of {name} ({len(journal)}):\n" + "\n".join(journal),
        name, journal, restarted)
