# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One deploy of an app at a time on a host: a lock file created exclusively, with who holds it, since when, from
which controller process, and when the deploy last showed a sign of life (its lease). And the maintenance lock beside
it: held by an operator, with a message, it refuses every deploy, rollback and restart until it is released.

Whether the deploy holding a lock is alive is judged on the controller (judge()): a lock taken from this controller
is alive exactly as long as the ansible-playbook process that took it; a lock from another controller is alive while
its lease is fresh (renewed on the hosts as the deploy works on them: each phase, and during every rolling restart).
"""

from __future__ import annotations

import datetime
import json
import os
import threading
import time

from ansible_collections.sturdy.workers.plugins.module_utils.names import MAINTENANCE_LOCK


class LockHeld(Exception):
    """Another run holds the lock; the message says who, since when, whether it is alive, and what to do."""

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
    try:
        data.setdefault("started_epoch", os.stat(path).st_mtime)
    except OSError:
        return None
    return data


def last_seen(holder: dict) -> float:
    """When the holder's deploy last showed a sign of life here (its lease renewal, or its start)."""
    return float(holder.get("renewed_epoch") or holder.get("started_epoch") or 0)


def _proc_start(pid, proc: str = "/proc") -> str | None:
    """A process's start time in clock ticks since boot (with the boot ID, it tells a PID reused by another process)."""
    try:
        with open(f"{proc}/{int(pid)}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, ValueError, IndexError, TypeError):
        return None


def _cmdline(pid, proc: str = "/proc") -> bytes | None:
    try:
        with open(f"{proc}/{int(pid)}/cmdline", "rb") as fh:
            return fh.read()
    except (OSError, ValueError):
        return None


def _is_playbook(cmdline: bytes | None) -> bool:
    return bool(cmdline) and any(os.path.basename(arg) == b"ansible-playbook" for arg in cmdline.split(b"\0")[:2])


def controller_identity(hostname: str, proc: str = "/proc") -> dict:
    """This controller's deploy process: the ansible-playbook process (the oldest ancestor running the same command
    line as this one, or ansible-playbook itself: Ansible's workers are its forks), with its start time and the boot
    ID."""
    pid, mine = os.getpid(), _cmdline(os.getpid(), proc)
    while True:
        try:
            with open(f"{proc}/{pid}/stat", encoding="utf-8") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        theirs = _cmdline(parent, proc)
        if parent <= 1 or not (theirs == mine or _is_playbook(theirs)):
            break
        pid = parent
    try:
        with open(f"{proc}/sys/kernel/random/boot_id", encoding="utf-8") as fh:
            boot_id = fh.read().strip()
    except OSError:
        boot_id = None
    return {"host": hostname, "boot_id": boot_id, "pid": pid, "pid_start": _proc_start(pid, proc)}


def judge(holder: dict, me: dict, lease: int, now: float, proc: str = "/proc") -> dict:
    """{"alive": bool, "why": str} for the deploy holding a lock, judged on the controller `me`."""
    ctl = holder.get("controller") or {}
    if ctl.get("host") and ctl.get("host") == me.get("host") and ctl.get("pid"):
        where = f"its ansible-playbook process {ctl['pid']} on {ctl['host']}"
        if ctl.get("boot_id") != me.get("boot_id"):
            return {"alive": False, "why": f"{ctl['host']} rebooted since {where} took it"}
        if _proc_start(ctl["pid"], proc) == ctl.get("pid_start"):
            return {"alive": True, "why": f"{where} is running"}
        return {"alive": False, "why": f"{where} is gone (killed, or its terminal closed)"}
    silent = int(now - last_seen(holder))
    origin = f"it was started from {ctl['host']}, so only its lease tells" if ctl.get("host") else "no controller named"
    if silent > lease:
        return {"alive": False, "why": f"no sign of life for {silent // 60} min {silent % 60} s, longer than its lease "
                                       f"(sturdy_deploy_lock_stale_after={lease} s); {origin}"}
    return {"alive": True, "why": f"last sign of life {silent} s ago; {origin}"}


def verdicts(holders: list, me: dict, lease: int, now: float, proc: str = "/proc") -> dict:
    """{run_id: judge()} for every run holding a lock on some host (`holders`: each host's lock content, empty where
    there is none). A run's lease counts where it was renewed last: the rollout works on a few hosts at a time."""
    runs: dict = {}
    for holder in holders:
        if not isinstance(holder, dict) or not holder:
            continue
        run = holder.get("run_id") or "?"
        entry = runs.setdefault(run, {"holder": holder, "locks": 0})
        entry["locks"] += 1
        if last_seen(holder) > last_seen(entry["holder"]):
            entry["holder"] = holder
    return {run: {**judge(e["holder"], me, lease, now, proc), "locks": e["locks"],
                  "renewed_epoch": last_seen(e["holder"])} for run, e in runs.items()}


def describe(path: str, holder: dict, verdict: dict, now: float) -> str:
    seconds = int(now - float(holder.get("started_epoch") or 0))
    who = (f"held by {holder.get('owner') or 'an unknown owner'} (run {holder.get('run_id', '?')}) for build "
           f"{holder.get('build_id') or '?'} since {holder.get('started', '?')}, {seconds // 60} min {seconds % 60} s ago")
    if not verdict["alive"]:
        return (f"The deploy lock {path} is held by a DEAD deploy: {who}; {verdict['why']}. It will never release the "
                "lock, and it may have left hosts or instances on different builds. Deploy again with "
                "sturdy_deploy_break_lock=true to take the lock over: that deploy brings every host and instance to "
                "its build")
    return (f"Another deploy is running: the deploy lock {path} is {who} ({verdict['why']}). Wait for it to finish "
            "and deploy again")


def _write(path: str, content: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(content, fh, sort_keys=True)
        fh.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def renew(path: str, run_id: str, now: float | None = None) -> bool:
    """Renew the lease of `run_id`'s lock (a sign of life); nothing when another run holds it or it is gone."""
    holder = read(path)
    if not holder or holder.get("run_id") != run_id:
        return False
    holder["renewed_epoch"] = time.time() if now is None else now
    _write(path, holder)
    return True


def take(path: str, run_id: str, owner: str = "", build_id: str = "", stale_after: int = 180,
         break_stale: bool = False, check: bool = False, now: float | None = None, controller: dict | None = None,
         verdict: dict | None = None, kind: str = "deploy") -> tuple[bool, dict, str | None]:
    """Take the lock for `run_id`: (changed, the holder before, a warning). A lock of the same run is renewed. Raises
    LockHeld while the maintenance lock is held (naming it; `kind` says what is refused), or when another run holds
    it, unless its deploy is dead (`verdict`, judged on the controller; without one, by its lease here) and
    `break_stale`. In check mode, only tells whether it could be taken."""
    now = time.time() if now is None else now
    holder = read(path)
    if holder is not None and holder.get("run_id") == run_id:
        if not check:
            renew(path, run_id, now)
        return False, holder, None
    # A maintenance lock refuses the next run, not one that holds the deploy lock already.
    maintenance = read(maintenance_path(path))
    if maintenance is not None:
        raise LockHeld(maintenance_refusal(kind, maintenance, now), maintenance)
    warning = None
    if holder is not None:
        verdict = verdict or judge(holder, {}, stale_after, now)
        if verdict["alive"] or not break_stale:
            raise LockHeld(describe(path, holder, verdict, now), holder)
        warning = (f"Took over the deploy lock {path} of a dead deploy: {holder.get('owner') or 'an unknown owner'} "
                   f"(run {holder.get('run_id', '?')}) for build {holder.get('build_id') or '?'}; {verdict['why']}")
        if not check:
            os.unlink(path)
    if check:
        return True, holder or {}, warning
    content = {"run_id": run_id, "owner": owner, "build_id": build_id, "pid": os.getpid(),
               "controller": controller or {}, "renewed_epoch": now}
    os.makedirs(os.path.dirname(path) or "/", 0o755, exist_ok=True)
    if not _create(path, content, now):
        # Another deploy took it between our read and now.
        other = read(path) or {}
        raise LockHeld(describe(path, other, {"alive": True, "why": "it took the lock a moment ago"}, now), other)
    return True, holder or {}, warning


def _create(path: str, content: dict, now: float) -> bool:
    """Write a lock file that does not exist yet (O_EXCL: of two writers exactly one succeeds), stamped with `now`;
    False when it exists already."""
    content = {**content, "started_epoch": now,
               "started": datetime.datetime.fromtimestamp(now, datetime.timezone.utc).isoformat(timespec="seconds")}
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        os.fchmod(fd, 0o644)
        json.dump(content, fh, sort_keys=True)
        fh.write("\n")
    return True


def maintenance_path(lock: str) -> str:
    """The maintenance lock beside the deploy lock `lock`."""
    return os.path.join(os.path.dirname(lock), MAINTENANCE_LOCK)


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s ago"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h ago" if seconds >= 86400 else \
        f"{seconds // 3600} h {seconds % 3600 // 60} min ago"


def describe_maintenance(holder: dict, now: float) -> str:
    """'locked for maintenance by alice@ci-7 since 2026-12-06T22:40:00+00:00 (12 min 3 s ago): "message"'."""
    return (f"locked for maintenance by {holder.get('owner') or 'an unknown owner'} since "
            f"{holder.get('started', '?')} ({_ago(now - float(holder.get('started_epoch') or now))}): "
            f"\"{holder.get('message') or ''}\"")


def maintenance_refusal(kind: str, holder: dict, now: float) -> str:
    """Why a deploy, rollback or restart is refused while the maintenance lock is held, and what to do."""
    return (f"{kind.capitalize()} refused: {describe_maintenance(holder, now)}. Nothing was changed. When the "
            "maintenance is over, release it (ansible-playbook sturdy.workers.unlock) and run this again")


def hold_maintenance(path: str, owner: str, message: str, check: bool = False,
                     now: float | None = None) -> tuple[bool, dict]:
    """Take the maintenance lock: (changed, the holder before). Held already with the same owner and message: kept
    as it is. Held by another owner or with another message: LockHeld, naming them (unlock first to replace it)."""
    now = time.time() if now is None else now
    holder = read(path)
    if holder is None and (check or _create(path, {"owner": owner, "message": message}, now)):
        return True, {}
    # Held, or created by another run a moment ago.
    holder = holder or read(path) or {}
    if (holder.get("owner"), holder.get("message")) == (owner, message):
        return False, holder
    raise LockHeld(f"Already {describe_maintenance(holder, now)}. Nothing was changed. To lock with another "
                   "message, release it first (ansible-playbook sturdy.workers.unlock)", holder)


def release_maintenance(path: str, check: bool = False) -> tuple[bool, dict]:
    """Remove the maintenance lock: (changed, the holder)."""
    holder = read(path)
    if holder is not None and not check:
        os.unlink(path)
    return holder is not None, holder or {}


def release(path: str, run_id: str, check: bool = False) -> tuple[bool, dict]:
    """Remove the lock if `run_id` holds it: (changed, the holder)."""
    holder = read(path)
    mine = holder is not None and holder.get("run_id") == run_id
    if mine and not check:
        os.unlink(path)
    return mine, holder or {}


class LeaseKeeper:
    """Renews a run's lease every `every` seconds while a long step (a rolling restart) runs on this host."""

    def __init__(self, path: str | None, run_id: str | None, every: float = 15.0):
        self.path, self.run_id, self.every = path, run_id, every
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if self.path and self.run_id:
            self._thread = threading.Thread(target=self._run, name="sturdy-lease", daemon=True)
            self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.every):
            try:
                renew(self.path, self.run_id)
            except OSError:
                pass

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return False
