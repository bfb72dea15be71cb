# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The app's pause marker (/srv/<app>/.paused): while it exists, the agent in every worker of the process types it
names (all when it names none) takes no message from their queues; it is read at the worker's start and every second
(the agent's core.paused_here()). Each worker says in systemd's StatusText whether it is paused."""

from __future__ import annotations

import datetime
import json
import os
import time

# A marker that cannot be read as JSON reads as {} (held by an unknown owner): it pauses every process type.
from ansible_collections.sturdy.workers.plugins.module_utils.deploy_lock import read  # noqa: F401 (re-exported)


def _write(path: str, content: dict) -> None:
    # Whole or not at all: a worker reading it half-written would take a broken marker for a pause of everything.
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(content, fh, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def pause(path: str, owner: str, message: str, processes: list[str], started: float | None = None,
          check: bool = False) -> tuple[bool, dict]:
    """Pause `processes` (all when empty), added to those paused already; the marker after, and whether it changed."""
    held = read(path)
    now = time.time() if started is None else float(started)
    if held and (not held.get("processes") or not processes):
        names: list[str] = []  # all, before or now
    else:
        names = sorted(set((held or {}).get("processes") or []) | set(processes))
    if held and sorted(held.get("processes") or []) == names and held.get("message") == message:
        return False, held
    content = {"owner": owner, "message": message, "processes": names,
               "started_epoch": (held or {}).get("started_epoch") or now,
               "started": (held or {}).get("started") or datetime.datetime.fromtimestamp(
                   now, datetime.timezone.utc).isoformat(timespec="seconds")}
    if not check:
        _write(path, content)
    return True, content


def resume(path: str, processes: list[str], declared: list[str], check: bool = False) -> tuple[bool, dict | None]:
    """Resume `processes` (all when empty); the marker after (None when nothing stays paused), and whether it
    changed. Resuming some while all are paused keeps the other `declared` ones paused."""
    held = read(path)
    if held is None:
        return False, None
    if not processes:
        left: list[str] = []
    else:
        paused = held.get("processes") or declared
        left = sorted(set(paused) - set(processes))
        if left == sorted(paused) and held.get("processes"):
            return False, held
    if not left:
        if not check:
            os.unlink(path)
        return True, None
    content = dict(held, processes=left)
    if not check:
        _write(path, content)
    return True, content


def confirmed(shown: list[dict], paused: bool) -> tuple[dict, list[str]]:
    """From `systemctl show -p Id,ActiveState,StatusText` blocks: each unit's state and status, and the active units
    whose agent does not say yet that it is paused (or, resuming, still says so)."""
    units, waiting = {}, []
    for props in shown:
        name, status = props.get("Id", "?"), props.get("StatusText", "")
        units[name] = {"active": props.get("ActiveState", ""), "status": status}
        if props.get("ActiveState") == "active" and status.startswith("paused") != paused:
            waiting.append(name)
    return units, waiting
