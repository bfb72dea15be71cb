# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write systemd unit files in one pass: each checked by systemd-analyze before it replaces the one on disk."""

from __future__ import annotations

import os
import re
import tempfile
from typing import Callable

from ansible_collections.sturdy.workers.plugins.module_utils.files import replace_file, same_file

# A unit file name: what systemd loads from a unit directory (a template ends in @.service).
UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]*)?\.(service|target|timer|socket|path|slice)$")

Runner = Callable[[list[str]], tuple[int, str, str]]


class UnitFileError(RuntimeError):
    pass


def differing(directory: str, units: dict[str, str]) -> dict[str, str]:
    """The units whose file in `directory` is missing, has other content, or is not root's 0644: name -> the
    content on disk, for the diff ('' when missing)."""
    for name in units:
        if not UNIT_NAME.match(name):
            raise UnitFileError(f"{name!r} is not a unit file name (for example shop-worker@.service)")
    found = {}
    for name, content in units.items():
        path = os.path.join(directory, name)
        if not same_file(path, content.encode("utf-8"), 0o644):
            try:
                with open(path, "rb") as fh:
                    found[name] = fh.read().decode("utf-8", "replace")
            except FileNotFoundError:
                found[name] = ""
    return found


def verify(units: dict[str, str], run: Runner, names: list[str] | None = None) -> None:
    """systemd-analyze verify on each of `names` (every unit of `units` by default) before any is written. All of
    `units` sit in the scratch directory under their own names, which systemd-analyze puts first in its search path:
    a socket finds the service it hands its connections to, a service the socket it requires."""
    with tempfile.TemporaryDirectory(prefix="sturdy-units-") as scratch:
        for name, content in units.items():
            with open(os.path.join(scratch, name), "w", encoding="utf-8") as fh:
                fh.write(content)
        for name in sorted(units if names is None else names):
            path = os.path.join(scratch, name)
            rc, out, err = run(["systemd-analyze", "verify", "--recursive-errors=no", path])
            if rc != 0:
                said = "\n".join((out + err).replace(scratch + "/", "").strip().splitlines()[-15:])
                raise UnitFileError(f"systemd-analyze verify refused {name}; nothing was written:\n{said}")


def write(directory: str, units: dict[str, str], run: Runner, check: bool, validate: bool = True,
          changed: dict[str, str] | None = None) -> list[str]:
    """Write every unit of `units` (name -> content) whose file differs (`changed`, from differing(), when the
    caller has it), root-owned 0644 and by rename, after all of them passed systemd-analyze verify. Returns the
    names written (in check mode, that would be)."""
    names = sorted(differing(directory, units) if changed is None else changed)
    if check or not names:
        return names
    if validate:
        verify(units, run, names)
    for name in names:
        replace_file(os.path.join(directory, name), units[name].encode("utf-8"), 0o644)
    return names
