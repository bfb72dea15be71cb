# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the last successful deploy left on a host, and whether deploying the same build again would change anything.

A successful deploy records, root-only on the host: the build, a fingerprint of everything it was given (the
sturdy_* variables, secret values included, and the collection's own code) and a digest of every file it wrote
(units, drop-ins, secrets, the metrics collector's). A redeploy of that build with the same fingerprint, on a host
whose files, `current` link and running instances are what the record says, has nothing to install, write or
restart: the deploy then only proves the instances (the smoke job). Anything else, however small, is a full deploy,
and `why` says what differed. Pure functions, no Ansible imports.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from typing import Any

from ansible_collections.sturdy.workers.plugins.module_utils.files import replace_file, same_file
from ansible_collections.sturdy.workers.plugins.module_utils.releases import (
    ReleaseError,
    read_json,
    sha256_file,
)

RECORD_VERSION = 1

# Variables that steer a run but change nothing the deploy writes; every other sturdy_* variable is in the fingerprint
# (a new one is, until named here: a needless full deploy is safe, a skipped one is not).
RUN_ONLY_PREFIXES = ("sturdy_deploy_", "sturdy_smoke_test_", "sturdy_status", "sturdy_diagnos", "sturdy_dead_letters_",
                     "sturdy_alerts_", "sturdy_release_build_")
# ... except these, which the deploy writes to the broker or checks the host against.
RUN_ONLY_KEPT = ("sturdy_deploy_broker", "sturdy_deploy_rabbitmq")
RUN_ONLY = (
    # Where the artifact lies on the controller (its checksum is checked against the release slot).
    "sturdy_artifact",
    # Facts and results the roles set while they run.
    "sturdy_release_current", "sturdy_release_switch", "sturdy_release_rolled_back_from", "sturdy_release_built",
    "sturdy_release_executables", "sturdy_worker_restarted", "sturdy_worker_lease", "sturdy_worker_restart_pending",
    "sturdy_worker_check_paths", "sturdy_worker_build_id", "sturdy_migrate_result", "sturdy_worker_units",
    "sturdy_worker_rendered",
    # Derived from the secrets (the generation that holds them), or the rollback playbook's own.
    "sturdy_secrets_generation", "sturdy_rollback_to",
)
# The collection's parts whose change may change what a deploy writes.
CODE_DIRS = ("roles", "plugins", "playbooks")


def fingerprinted(variables: dict[str, Any]) -> dict[str, Any]:
    """The variables that go into the fingerprint."""
    return {name: value for name, value in variables.items()
            if name.startswith("sturdy_") and name not in RUN_ONLY
            and (name in RUN_ONLY_KEPT or not name.startswith(RUN_ONLY_PREFIXES))}


def code_digest(root: str) -> str:
    """A digest of the collection's roles, plugins and playbooks under `root` (names and contents)."""
    digest = hashlib.sha256()
    for part in CODE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, part)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith((".pyc", ".pyo")):
                    continue
                path = os.path.join(dirpath, name)
                digest.update(f"{os.path.relpath(path, root)}\0{sha256_file(path)}\0".encode())
    return digest.hexdigest()


def fingerprint(variables: dict[str, Any], code: str) -> str:
    """One digest of the deploy's input: the fingerprinted variables (secret values included) and the code digest."""
    text = json.dumps(fingerprinted(variables), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(f"{RECORD_VERSION}\0{code}\0{text}".encode()).hexdigest()


def _file_digest(path: str) -> str:
    info = os.lstat(path)
    what = "link " + os.readlink(path) if os.path.islink(path) else sha256_file(path)
    # Owner and mode too: a secret file made world-readable by hand is a difference.
    return f"{info.st_mode:o} {info.st_uid}:{info.st_gid} {what}"


def file_digests(patterns: list[str]) -> dict[str, str]:
    """Path to digest of every file the glob `patterns` name, directories walked."""
    found: dict[str, str] = {}
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            if os.path.isdir(path) and not os.path.islink(path):
                for dirpath, dirnames, filenames in os.walk(path):
                    dirnames.sort()
                    for name in sorted(filenames):
                        found[os.path.join(dirpath, name)] = _file_digest(os.path.join(dirpath, name))
            elif os.path.lexists(path):
                found[path] = _file_digest(path)
    return found


def record(build_id: str, print_: str, digests: dict[str, str]) -> dict[str, Any]:
    return {"version": RECORD_VERSION, "build_id": build_id, "fingerprint": print_, "files": digests}


def _files_why(recorded: dict[str, str], now: dict[str, str]) -> str:
    changed = sorted(p for p in set(recorded) | set(now) if recorded.get(p) != now.get(p))
    if not changed:
        return ""
    first = changed[0]
    how = "is gone" if first not in now else "appeared" if first not in recorded else "changed"
    more = f" (and {len(changed) - 1} other file(s))" if len(changed) > 1 else ""
    return f"{first} {how} since the last deploy{more}"


def _units_why(declared: list[str], units: dict[str, dict], release: str, releases: str,
               elsewhere: list[str]) -> str:
    for unit in elsewhere:
        if (units.get(unit) or {}).get("ActiveState") in ("active", "activating", "reloading"):
            return f"{unit} runs here, but its singleton process type belongs to another host"
    for unit in declared:
        props = units.get(unit) or {}
        if props.get("ActiveState") != "active":
            return f"{unit} is {props.get('ActiveState') or 'not loaded'}"
        if props.get("NeedDaemonReload") == "yes" or props.get("Outdated"):
            return f"{unit} runs an older definition than its unit files"
        cwd = props.get("Cwd") or ""
        if cwd.startswith(releases + "/") and cwd != release and not cwd.startswith(release + "/"):
            return f"{unit} runs from {cwd}"
    return ""


def differs(found: dict[str, Any] | None, build_id: str, print_: str, digests: dict[str, str], current: str | None,
            declared: list[str], units: dict[str, dict], release: str, releases: str,
            elsewhere: list[str] | None = None) -> str:
    """Why deploying `build_id` here would change something ("" when nothing differs). `found` is the record the
    last successful deploy left, `current` the build the current link names, `declared` the instances that must run
    here and `elsewhere` those that must not (a singleton placed on another host)."""
    if not found:
        return "no successful deploy is recorded here"
    if found.get("version") != RECORD_VERSION:
        return "the record of the last deploy is from another version of the collection"
    if found.get("build_id") != build_id:
        return f"the last successful deploy here was build {found.get('build_id')}"
    if current != build_id:
        return f"current names {current or 'no release'}"
    if found.get("fingerprint") != print_:
        return "the variables, secrets or the collection changed since the last deploy"
    return (_files_why(found.get("files") or {}, digests)
            or _units_why(declared, units, release, releases, elsewhere or []))


def read_record(path: str) -> dict[str, Any] | None:
    """The record at `path`; None when there is none or it cannot be read (then the deploy is a full one)."""
    try:
        data = read_json(path)
    except ReleaseError:
        return None
    return data if isinstance(data, dict) else None


def write_json(path: str, data: dict[str, Any], mode: int) -> bool:
    """Write `data` to `path` atomically with `mode`; False when the file already held it."""
    text = (json.dumps(data, sort_keys=True, indent=1) + "\n").encode("utf-8")
    if same_file(path, text, mode):
        return False
    replace_file(path, text, mode)
    return True
