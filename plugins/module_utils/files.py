# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Root-owned directories and files replaced whole: what the modules write on a host."""

from __future__ import annotations

import os
import stat


class NotADirectory(OSError):
    pass


def own_directory(path: str, mode: int, check: bool, parents: bool = False) -> bool:
    """Make `path` a root-owned directory with `mode` (created, or its owner and mode corrected); whether it
    changed. A link to a directory is followed, as the file module does. With `parents`, missing parents are
    created root-owned 0755. In check mode only tells."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise NotADirectory(f"{path} exists and is not a directory: move it away")
    if st is not None and (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, mode):
        return False
    if not check:
        if st is None and parents:
            parent = os.path.dirname(os.path.normpath(path))
            if parent != path and not os.path.exists(parent):
                own_directory(parent, 0o755, check, parents=True)
        if st is None:
            os.mkdir(path, mode)
        os.chown(path, 0, 0)
        os.chmod(path, mode)
    return True


def same_file(path: str, data: bytes, mode: int, gid: int | None = 0) -> bool:
    """Whether `path` is a regular file owned by root and `gid` with `mode` that holds `data` (a link is not)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) != (0, gid, mode):
            return False
        with open(path, "rb") as fh:
            return fh.read() == data
    except FileNotFoundError:
        return False


def replace_file(path: str, data: bytes, mode: int = 0o644, gid: int = 0) -> None:
    """Write `path` by rename, owned by root and `gid` with `mode` before a byte is written, so a reader never sees
    half a file nor, for a secret, a moment with looser permissions."""
    tmp = f"{path}.sturdy-tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        os.fchown(fd, 0, gid)
        os.fchmod(fd, mode)
        fh.write(data)
        fh.flush()
        os.fsync(fd)
    os.replace(tmp, path)
