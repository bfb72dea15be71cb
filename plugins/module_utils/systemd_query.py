# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read unit state from systemctl: parsing is pure, running goes through a caller-supplied function."""

from __future__ import annotations

import re
from typing import Callable

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

_VERSION_RE = re.compile(r"^systemd (\d+)")


class SystemdQueryError(RuntimeError):
    pass


def parse_version(text: str) -> int:
    """'systemd 257 (257.13-1~deb13u1)\\n+PAM ...' -> 257."""
    match = _VERSION_RE.match(text.strip())
    if not match:
        raise SystemdQueryError(f"cannot read the systemd version from {text.strip()[:80]!r}")
    return int(match.group(1))


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
            current[key] = value
    if current:
        blocks.append(current)
    return blocks


def parse_members(text: str) -> list[str]:
    """Service units named in `systemctl show --property=Wants,ConsistsOf --value TARGET`."""
    return sorted({word for word in text.split() if word.endswith(".service")})


def query(run: Runner, units: list[str], target: str | None, properties=DEFAULT_PROPERTIES) -> dict:
    """systemd version, the target's member services, and properties of the members and `units`."""
    rc, out, err = run(["systemctl", "--version"])
    if rc != 0:
        raise SystemdQueryError(f"systemctl --version failed (rc {rc}): {err.strip()}")
    result: dict = {"systemd_version": parse_version(out), "members": [], "units": {}}
    if target:
        rc, out, err = run(["systemctl", "show", "--property=Wants,ConsistsOf", "--value", target])
        if rc != 0:
            raise SystemdQueryError(f"systemctl show {target} failed (rc {rc}): {err.strip()}")
        result["members"] = parse_members(out)
    names = list(dict.fromkeys(list(units) + result["members"]))
    if names:
        props = list(dict.fromkeys(["Id", *properties]))
        rc, out, err = run(["systemctl", "show", "--property=" + ",".join(props), "--", *names])
        if rc != 0:
            raise SystemdQueryError(f"systemctl show failed (rc {rc}): {err.strip()}")
        blocks = parse_show(out)
        if len(blocks) != len(names):
            raise SystemdQueryError(f"systemctl show returned {len(blocks)} units for {len(names)} requested")
        # systemctl prints units in the order asked; Id may differ for aliases, so key by the request.
        result["units"] = dict(zip(names, blocks))
    return result
