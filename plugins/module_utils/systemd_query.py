# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read unit state from systemctl: parsing is pure, running goes through a caller-supplied function."""

from __future__ import annotations

import fnmatch
import os
import re
import time
from typing import Callable

# What systemctl and journalctl are run with: plain, uncoloured, unpaged output.
ENV = {"LC_ALL": "C", "SYSTEMD_COLORS": "0", "SYSTEMD_PAGER": ""}

# (rc, stdout, stderr) = run(argv)
Runner = Callable[[list], tuple]

DEFAULT_PROPERTIES = (
    "Id",
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "Result",
    "NRestarts",
    "MainPID",
    "InvocationID",
    "NeedDaemonReload",
)

# What outdated-ness needs besides the caller's properties.
CREDENTIAL_LINE = re.compile(r"^\s*LoadCredential(?:Encrypted)?=[^:\n]+:(/\S+)\s*$", re.MULTILINE)
STALENESS_PROPERTIES = ("ActiveState", "MainPID", "ExecMainStartTimestampMonotonic", "FragmentPath", "DropInPaths", "EnvironmentFiles")

# Where unit files live, highest precedence first (systemd.unit(5), system units).
UNIT_DIRS = (
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
)

_VERSION_RE = re.compile(r"^systemd (\d+)")


class SystemdQueryError(RuntimeError):
    pass


def parse_version(text: str) -> int:
    """'systemd 257 (257.13-1~deb13u1)\\n+PAM ...' -> 257."""
    match = _VERSION_RE.match(text.strip())
    if not match:
        raise SystemdQueryError(f"cannot read the systemd version from {text.strip()[:80]!r}")
    return int(match.group(1))


_SPAN_PART = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s|min|h|d|w)(?![a-z])")
_SPAN_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1, "min": 60, "h": 3600, "d": 86400, "w": 604800}


def timespan_seconds(text: str | None) -> float | None:
    """Seconds in a time span as `systemctl show` prints it ("1min 30s", "500ms"); None for "infinity" or no span."""
    text = (text or "").strip()
    parts = _SPAN_PART.findall(text)
    if not parts or _SPAN_PART.sub("", text).strip():
        return None
    return round(sum(float(number) * _SPAN_SECONDS[unit] for number, unit in parts), 6)


def parse_show(text: str) -> list[dict[str, str]]:
    """Split `systemctl show` output for several units (blank-line separated) into dicts."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition("=")
        if sep:
            # Some properties come one line per value (EnvironmentFiles=, one per file): keep them all.
            current[key] = f"{current[key]}\n{value}" if key in current else value
    if current:
        blocks.append(current)
    return blocks


def parse_members(text: str) -> list[str]:
    """Service units named in `systemctl show --property=Wants,ConsistsOf --value TARGET`."""
    return sorted({word for word in text.split() if word.endswith(".service")})


def members(run: Runner, target: str) -> list[str]:
    """The service units `target` wants (see parse_members)."""
    rc, out, err = run(["systemctl", "show", "--property=Wants,ConsistsOf", "--value", target])
    if rc != 0:
        raise SystemdQueryError(f"systemctl show {target} failed (rc {rc}): {err.strip()}")
    return parse_members(out)


def definition_paths(props: dict[str, str], read: Callable[[str], str] | None = None) -> list[str]:
    """Files a unit's running definition came from: the unit file, drop-ins, environment files and, when
    `read` (path -> text) is given, the credential files its unit file and drop-ins load."""
    units = [props.get("FragmentPath", "")] + props.get("DropInPaths", "").split()
    paths = list(units)
    # EnvironmentFiles=/etc/shop/shop.env (ignore_errors=no)
    paths += re.findall(r"(/\S+) \(ignore_errors=\w+\)", props.get("EnvironmentFiles", ""))
    if read:
        # systemctl show prints LoadCredential= as [unprintable]; the unit files say it plainly.
        for unit in filter(None, units):
            paths += CREDENTIAL_LINE.findall(read(unit))
    return [p for p in paths if p]


def is_outdated(
    props: dict[str, str],
    mtime: Callable[[str], float | None],
    monotonic_offset: float,
    read: Callable[[str], str] | None = None,
) -> bool:
    """True when a running main process started before its unit, a drop-in, an environment file or a loaded
    credential changed.

    Such a process runs an older definition than the one on disk; a restart picks up the new one.
    `monotonic_offset` is realtime minus monotonic now, to put file mtimes on systemd's monotonic clock.
    """
    if props.get("ActiveState") != "active" or props.get("MainPID", "0") in ("", "0"):
        return False
    started = int(props.get("ExecMainStartTimestampMonotonic") or 0) / 1e6
    if not started:
        return False
    changed = [m for m in (mtime(p) for p in definition_paths(props, read)) if m is not None]
    return bool(changed) and max(changed) - monotonic_offset > started


def started_at(props: dict[str, str], monotonic_offset: float) -> float | None:
    """When the running main process started, in seconds since the epoch; None when none runs."""
    started = int(props.get("ExecMainStartTimestampMonotonic") or 0) / 1e6
    if props.get("ActiveState") not in ("active", "reloading") or props.get("MainPID", "0") in ("", "0") or not started:
        return None
    return round(started + monotonic_offset, 3)


def find_unit_files(patterns: list[str], marker: str | None, unit_dirs=UNIT_DIRS) -> dict[str, dict]:
    """Unit files whose names match `patterns`, the one systemd would use, and whether it carries `marker`.

    The marker is a whole line the collection writes into its units, so a file without it was written
    by someone else (the OS, an administrator, another app).
    """
    found: dict[str, dict] = {}
    for directory in unit_dirs:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            if name in found or not any(fnmatch.fnmatchcase(name, p) for p in patterns):
                continue
            path = os.path.join(directory, name)
            entry = {"path": path, "marker": False}
            if marker:
                try:
                    with open(path, encoding="utf-8", errors="replace") as fh:
                        entry["marker"] = any(line.rstrip("\n") == marker for line in fh)
                except OSError:
                    pass
            found[name] = entry
    return found


def default_read(path: str) -> str | None:
    """A file's text (undecodable bytes replaced), or None when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return None


def _read(path: str) -> str:
    return default_read(path) or ""


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def query(
    run: Runner,
    units: list[str],
    target: str | None,
    properties=DEFAULT_PROPERTIES,
    mtime: Callable[[str], float | None] = _mtime,
    read: Callable[[str], str] = _read,
) -> dict:
    """systemd version, the target's member services, and properties of the members and `units`.

    Each unit also gets ``Outdated`` (see is_outdated) and ``StartedAt`` (see started_at).
    """
    rc, out, err = run(["systemctl", "--version"])
    if rc != 0:
        raise SystemdQueryError(f"systemctl --version failed (rc {rc}): {err.strip()}")
    result: dict = {"systemd_version": parse_version(out), "members": [], "units": {}}
    if target:
        result["members"] = members(run, target)
    names = list(dict.fromkeys(list(units) + result["members"]))
    if names:
        props = list(dict.fromkeys(["Id", *properties, *STALENESS_PROPERTIES]))
        offset = time.time() - time.monotonic()
        rc, out, err = run(["systemctl", "show", "--property=" + ",".join(props), "--", *names])
        if rc != 0:
            raise SystemdQueryError(f"systemctl show failed (rc {rc}): {err.strip()}")
        blocks = parse_show(out)
        if len(blocks) != len(names):
            raise SystemdQueryError(f"systemctl show returned {len(blocks)} units for {len(names)} requested")
        # systemctl prints units in the order asked; Id may differ for aliases, so key by the request.
        result["units"] = dict(zip(names, blocks))
        for unit_props in result["units"].values():
            unit_props["Outdated"] = is_outdated(unit_props, mtime, offset, read)
            unit_props["StartedAt"] = started_at(unit_props, offset)
            unit_props["StartedMonotonic"] = started_at(unit_props, 0.0)
    return result


def systemctl_runner(module) -> Runner:
    """A Runner for an AnsibleModule: systemctl as the host has it, in the C locale without colours. Fails the
    module on a host without systemctl."""
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        module.fail_json(msg="systemctl not found: this host is not managed by systemd, which sturdy.workers needs")

    def run(argv):
        return module.run_command([systemctl, *argv[1:]], environ_update={"LC_ALL": "C", "SYSTEMD_COLORS": "0"})

    return run


def add_cwd(units: dict[str, dict], proc: str = "/proc") -> None:
    """Give each unit `Cwd`: the working directory of its main process, resolved (the release it runs from; a deploy
    killed midway leaves several), None when it is not running."""
    for props in units.values():
        pid = props.get("MainPID") or "0"
        try:
            props["Cwd"] = os.path.realpath(f"{proc}/{int(pid)}/cwd") if pid != "0" else None
        except (OSError, ValueError):
            props["Cwd"] = None


# What the crash-loop watch compares while a restarted unit settles.
WATCH_PROPERTIES = ("ActiveState", "SubState", "Result", "NRestarts", "MainPID", "InvocationID")


def crash_signs(started: dict[str, str], now: dict[str, str]) -> str | None:
    """Why a unit that was started as `started` is not stable in `now`, or None.

    Stable means: still active, the same invocation and main process, and no automatic restart since the
    deliberate one (a manual restart sets NRestarts to 0).
    """
    if now.get("ActiveState") != "active":
        return (f"it is {now.get('ActiveState')} ({now.get('SubState')}, result {now.get('Result')}), "
                f"restarted automatically {now.get('NRestarts', '?')} time(s)")
    if now.get("InvocationID") != started.get("InvocationID") or now.get("NRestarts", "0") != started.get("NRestarts", "0"):
        return (f"systemd restarted it on its own (NRestarts {started.get('NRestarts')} -> {now.get('NRestarts')}, "
                f"a new invocation): it crashed and came back, a crash loop")
    if now.get("MainPID") != started.get("MainPID"):
        return f"its main process changed ({started.get('MainPID')} -> {now.get('MainPID')}) without a restart by systemd"
    return None
