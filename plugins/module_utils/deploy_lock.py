# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One deploy of an app at a time on a host: a lock file created exclusively, with who holds it and since when."""

from __future__ import annotations

import datetime
import json
import os
import time


class LockHeld(Exception):
    """Another run holds the lock; the message says who, since when, and what to do."""

    def __init__(self, msg: str, holder: dict):
        super().__init__(msg)
        self.holder = holder


def read(path: str) -> dict | None:
    """The lock's content, None when there is no lock; a lock that cannot be parsed is held by an unknown owner."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    data.setdefault("started_epoch", os.stat(path).st_mtime)
    return data


def age(holder: dict, now: float) -> int:
    return int(now - float(holder.get("started_epoch") or 0))


def describe(path: str, holder: dict, stale_after: int, now: float) -> str:
    seconds = age(holder, now)
    who = (f"held by {holder.get('owner') or 'an unknown owner'} (run {holder.get('run_id', '?')}) for build "
           f"{holder.get('build_id') or '?'} since {holder.get('started', '?')}, {seconds // 60} min {seconds % 60} s ago")
    if seconds > stale_after:
        return (f"The deploy lock {path} is STALE: {who}, longer than any deploy takes ({stale_after} s). Its deploy "
                f"probably died before it could release it. If no deploy of this app is running, remove it (rm {path}) "
                "or deploy with sturdy_deploy_break_lock=true")
    return (f"Another deploy is running: the deploy lock {path} is {who}. Wait for it to finish and deploy again; "
            f"if you are sure it is dead, remove the file")


def take(path: str, run_id: str, owner: str = "", build_id: str = "", stale_after: int = 3600,
         break_stale: bool = False, check: bool = False, now: float | None = None) -> tuple[bool, dict, str | None]:
    """Take the lock for `run_id`: (changed, the holder before, a warning). Raises LockHeld when another run holds
    it, unless it is stale and `break_stale`. In check mode, only tells whether it could be taken."""
    now = time.time() if now is None else now
    holder = read(path)
    if holder is not None and holder.get("run_id") == run_id:
        return False, holder, None
    warning = None
    if holder is not None:
        if not (age(holder, now) > stale_after and break_stale):
            raise LockHeld(describe(path, holder, stale_after, now), holder)
        warning = f"Took over the stale deploy lock {path}: {describe(path, holder, stale_after, now)}"
        if not check:
            os.unlink(path)
    if check:
        return True, holder or {}, warning
    content = {
        "run_id": run_id, "owner": owner, "build_id": build_id, "pid": os.getpid(),
        "started": datetime.datetime.fromtimestamp(now, datetime.timezone.utc).isoformat(timespec="seconds"),
        "started_epoch": now,
    }
    os.makedirs(os.path.dirname(path) or "/", 0o755, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        # Another deploy took it between our read and now.
        other = read(path) or {}
        raise LockHeld(describe(path, other, stale_after, now), other) from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(content, fh, sort_keys=True)
        fh.write("\n")
    return True, holder or {}, warning


def release(path: str, run_id: str, check: bool = False) -> tuple[bool, dict]:
    """Remove the lock if `run_id` holds it: (changed, the holder)."""
    holder = read(path)
    mine = holder is not None and holder.get("run_id") == run_id
    if mine and not check:
        os.unlink(path)
    return mine, holder or {}
