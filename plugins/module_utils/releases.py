# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Releases on a host: /srv/<app>/releases/<build_id>/ with RELEASE.json, and the links `current`
and `previous` beside them. Pure file-system logic, used by the release module and its unit tests."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import tarfile
from typing import Callable

from ansible_collections.sturdy.workers.plugins.module_utils.app_plan import BUILD_ID, release_dir, root_paths
from ansible_collections.sturdy.workers.plugins.module_utils.names import RELEASE_FILE

MANIFEST_FILE = "MANIFEST.json"
# Written first and removed last: a release directory that still has it is an interrupted install.
PARTIAL_MARKER = ".sturdy-partial"
# Names pip may install from the wheelhouse: a requirement name with an optional version pin.
REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?(==[A-Za-z0-9.+!_-]+)?$")


class ReleaseError(Exception):
    """Something an operator must fix; the message says what and how."""


class Layout:
    """Where one app's releases and links live."""

    def __init__(self, root: str):
        where = root_paths(root)
        self.root, self.releases, self.current, self.previous = (
            where[k] for k in ("root", "releases", "current", "previous"))

    def release(self, build_id: str) -> str:
        return release_dir(self.root, build_id)

    def link_target(self, link: str) -> str | None:
        """The build ID a link points at (releases/<id>), or None when there is no such link."""
        try:
            target = os.readlink(link)
        except OSError:
            return None
        parent, name = os.path.split(os.path.normpath(os.path.join(self.root, target)))
        if parent != self.releases or not BUILD_ID.match(name):
            raise ReleaseError(f"{link} points at {target}, which is not a release under {self.releases}/; "
                               "re-point it by hand (ln -sfn releases/<build_id> ...) or remove it")
        return name


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ReleaseError(f"cannot read {path}: {exc}") from exc


def release_state(layout: Layout, build_id: str) -> str:
    """'absent', 'installed', 'partial' (interrupted install) or 'foreign' (a directory we did not write)."""
    path = layout.release(build_id)
    if not os.path.lexists(path):
        return "absent"
    # An empty directory is an install interrupted before it could write its marker.
    if os.path.exists(os.path.join(path, PARTIAL_MARKER)) or (os.path.isdir(path) and not os.listdir(path)):
        return "partial"
    if os.path.isdir(path) and not os.path.islink(path) and os.path.isfile(os.path.join(path, RELEASE_FILE)):
        return "installed"
    return "foreign"


def _in_state(layout: Layout, state: str) -> list[str]:
    try:
        names = os.listdir(layout.releases)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if BUILD_ID.match(n) and release_state(layout, n) == state)


def installed(layout: Layout) -> list[dict]:
    """Every complete release, oldest install first."""
    found = []
    for name in _in_state(layout, "installed"):
        info = read_json(os.path.join(layout.release(name), RELEASE_FILE)) or {}
        found.append({"build_id": name, "installed_at": str(info.get("installed_at", "")),
                      "checksum": info.get("checksum", "")})
    return sorted(found, key=lambda r: (r["installed_at"], r["build_id"]))


def partial(layout: Layout) -> list[str]:
    """Directories of interrupted installs."""
    return _in_state(layout, "partial")


def check_slot(layout: Layout, build_id: str, checksum: str) -> str:
    """State of the release directory for `build_id`, refusing one that holds another artifact."""
    state = release_state(layout, build_id)
    if state == "foreign":
        raise ReleaseError(f"{layout.release(build_id)} exists but has no {RELEASE_FILE}: it was not installed by "
                           "sturdy.workers. Move it away, then deploy again")
    if state == "installed":
        info = read_json(os.path.join(layout.release(build_id), RELEASE_FILE)) or {}
        if info.get("checksum") != checksum:
            raise ReleaseError(
                f"build {build_id} is already installed from another artifact (sha256 {info.get('checksum')}, "
                f"this one is {checksum}). A build ID names one artifact forever: give the new build its own "
                f"sturdy_build_id, or deploy the artifact that was built as {build_id}")
    return state


def in_use(layout: Layout, proc: str = "/proc", readlink: Callable[[str], str] = os.readlink,
           ) -> tuple[dict[str, list[int]], list[int]]:
    """Build ID -> PIDs of processes whose working directory or executable lies inside that release, and the
    PIDs whose links could not be read (without CAP_SYS_PTRACE, root cannot read other users' links)."""
    prefix = os.path.realpath(layout.releases) + os.sep
    users: dict[str, set[int]] = {}
    unreadable: set[int] = set()
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        for link in ("cwd", "exe"):
            try:
                target = readlink(os.path.join(proc, entry, link))
            except PermissionError:
                unreadable.add(int(entry))
                continue
            except OSError:  # gone, or a kernel thread
                continue
            if target.startswith(prefix):
                users.setdefault(target[len(prefix):].split(os.sep, 1)[0], set()).add(int(entry))
    return {build: sorted(pids) for build, pids in users.items()}, sorted(unreadable)


def prune_plan(releases: list[dict], keep: int, protected: set[str]) -> list[str]:
    """Build IDs to delete: all but the `keep` newest installs, never a protected one."""
    newest_first = [r["build_id"] for r in reversed(releases)]
    return [b for b in newest_first[keep:] if b not in protected]


def replace_link(link: str, target: str) -> None:
    """Point `link` at `target` atomically: a temporary link renamed over the old one, so a reader sees
    either the old target or the new, never no link."""
    tmp = os.path.join(os.path.dirname(link), f".{os.path.basename(link)}.tmp-{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)
    fd = os.open(os.path.dirname(link), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unpack(artifact: str, dest: str) -> None:
    """Extract regular files and directories only, inside `dest`, owned by root, not writable by others."""
    with tarfile.open(artifact, "r:gz") as tar:
        for member in tar.getmembers():
            name = os.path.normpath(member.name)
            if name.startswith("/") or name == ".." or name.startswith("../") or not (member.isfile() or member.isdir()):
                raise ReleaseError(f"{artifact}: entry {member.name!r} is not a plain file or directory inside the "
                                   "release; rebuild the artifact without links, devices or absolute paths")
            path = os.path.join(dest, name)
            if member.isdir():
                os.makedirs(path, 0o755, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
            source = tar.extractfile(member)
            with open(path, "wb") as out:
                shutil.copyfileobj(source, out)
            os.chmod(path, 0o755 if member.mode & 0o111 else 0o644)


def read_manifest(dest: str, build_id: str, artifact: str) -> dict:
    manifest = read_json(os.path.join(dest, MANIFEST_FILE))
    if manifest is None:
        raise ReleaseError(f"{artifact} has no {MANIFEST_FILE} at its top level; it is not a release artifact")
    if manifest.get("build_id") != build_id:
        raise ReleaseError(f"{artifact} is build {manifest.get('build_id')!r}, not sturdy_build_id={build_id!r}: "
                           "deploy the artifact built for this build ID, or set sturdy_build_id to the artifact's")
    install = manifest.get("install")
    if not isinstance(install, list) or not install or not all(isinstance(r, str) and REQUIREMENT.match(r)
                                                               for r in install):
        raise ReleaseError(f"{artifact}: {MANIFEST_FILE} needs 'install', a non-empty list of requirement names "
                           "(for example [\"shopdemo==1.0\"]) to install from its wheelhouse/")
    return manifest


Runner = Callable[[list[str], dict], tuple[int, str, str]]


def offline_env() -> dict:
    """Environment for pip: no index, and no user or site configuration that could name one."""
    return {"PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_CACHE_DIR": "1", "PIP_NO_INPUT": "1"}


# The pip wheel the interpreter's ensurepip would install (Debian's python3-venv ships it in /usr/share/python-wheels,
# upstream Python in ensurepip/_bundled), printed by the interpreter that builds the venv; nothing when it has none.
FIND_PIP_WHEEL = ("import glob, os, sysconfig; print((sorted(glob.glob('/usr/share/python-wheels/pip-*.whl')) or sorted("
                  "glob.glob(os.path.join(sysconfig.get_path('stdlib'), 'ensurepip', '_bundled', 'pip-*.whl'))) "
                  "or [''])[-1])")


def build_venv(dest: str, python: str, install: list[str], run: Runner) -> None:
    """The release's venv, its requirements installed offline from its wheelhouse. pip runs from the interpreter's
    own pip wheel and stays out of the venv: a release is never installed into again, and ensurepip's copy of pip
    (unpacked and compiled into every venv) cost as much CPU as the app's whole install."""
    venv = os.path.join(dest, "venv")
    rc, out, dummy = run([python, "-c", FIND_PIP_WHEEL], offline_env())
    wheel = out.strip() if rc == 0 else ""
    pip = [os.path.join(wheel, "pip")] if wheel else ["-m", "pip"]
    steps = [
        [python, "-m", "venv", *(["--without-pip"] if wheel else []), venv],
        # Wheels only: building an sdist would run the artifact's build code as root, and need a compiler.
        [os.path.join(venv, "bin", "python"), *pip, "install", "--no-index", "--only-binary=:all:",
         "--find-links", os.path.join(dest, "wheelhouse"), *install],
    ]
    for argv in steps:
        rc, out, err = run(argv, offline_env())
        if rc != 0:
            tail = "\n".join((out + err).strip().splitlines()[-15:])
            raise ReleaseError(f"{' '.join(argv[:4])} ... failed (rc {rc}); the install used no package index, so "
                               f"every dependency must be a wheel in the artifact's wheelhouse/:\n{tail}")


AGENT_PACKAGE = "sturdy_agent"
# A .pth line starting with `import` runs at interpreter start: the agent hooks in only where the unit sets
# STURDY_AGENT, so the app's code needs no change.
AGENT_PTH = ("sturdy_agent.pth", "import sturdy_agent; sturdy_agent.activate()\n")
# Where the agent lived before it was a package (removed from a release the module updates).
AGENT_OLD_MODULE = "sturdy_agent.py"


def agent_package(root: str) -> dict[str, str]:
    """The worker agent package as a release's venv gets it, file name -> source: roles/release/files/sturdy_agent/
    under the collection's `root`, and the collection's names (plugins/module_utils/names.py) as its names.py."""
    where = os.path.join(root, "roles", "release", "files", AGENT_PACKAGE)
    paths = {name: os.path.join(where, name) for name in sorted(os.listdir(where)) if name.endswith(".py")}
    paths["names.py"] = os.path.join(root, "plugins", "module_utils", "names.py")
    files = {}
    for name, path in paths.items():
        with open(path, encoding="utf-8") as fh:
            files[name] = fh.read()
    return files


def agent_digest(files: dict[str, str]) -> str:
    """One SHA-256 of the whole agent package (names and contents)."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{hashlib.sha256(files[name].encode()).hexdigest()}\0".encode())
    return digest.hexdigest()


def site_packages(release: str) -> str:
    """The site-packages directory of a release's venv."""
    lib = os.path.join(release, "venv", "lib")
    found = sorted(d for d in os.listdir(lib) if d.startswith("python")) if os.path.isdir(lib) else []
    if not found:
        raise ReleaseError(f"{release} has no venv/lib/python*/: the release is incomplete; remove it and deploy again")
    return os.path.join(lib, found[-1], "site-packages")


def agent_changes(release: str, files: dict[str, str]) -> dict[str, str | None]:
    """What to write into a release's venv for the agent package `files` (agent_package()): path -> content for a
    file missing or different, path -> None for one to remove (a module the package no longer has, the single-file
    agent of an older collection)."""
    where = site_packages(release)
    package = os.path.join(where, AGENT_PACKAGE)
    wanted = {os.path.join(package, name): text if text.endswith("\n") else text + "\n" for name, text in files.items()}
    wanted[os.path.join(where, AGENT_PTH[0])] = AGENT_PTH[1]
    changes: dict[str, str | None] = {}
    for path, content in wanted.items():
        try:
            with open(path, encoding="utf-8") as fh:
                if fh.read() == content:
                    continue
        except OSError:
            pass
        changes[path] = content
    stale = [os.path.join(package, n) for n in (os.listdir(package) if os.path.isdir(package) else [])
             if n.endswith(".py")] + [os.path.join(where, AGENT_OLD_MODULE)]
    changes.update((path, None) for path in stale if path not in wanted and os.path.lexists(path))
    # The order they are written in keeps every interpreter starting meanwhile whole: the modules, then the .pth
    # (its activate() is the old single-file agent's too, which wins over a package without __init__.py), then
    # __init__.py (the package now wins, complete), then the removals.
    last = {os.path.join(where, AGENT_PTH[0]): 1, os.path.join(package, "__init__.py"): 2}
    return dict(sorted(changes.items(), key=lambda item: 3 if item[1] is None else last.get(item[0], 0)))


def missing_executables(release: str, executables: dict[str, str]) -> list[str]:
    """What in `executables` (path inside the release -> what declares it) is not an executable file in `release`."""
    problems = []
    for path, what in sorted(executables.items()):
        full = os.path.join(release, path)
        if not os.path.isfile(full):
            problems.append(f"{what} is missing in {release}")
        elif not os.stat(full).st_mode & 0o001:
            problems.append(f"{what} is not executable by the app's user in {release}")
    return problems


def install(layout: Layout, build_id: str, artifact: str, checksum: str, commit: str, python: str,
            run: Runner) -> dict:
    """Unpack `artifact` into releases/<build_id>, build its venv offline, write RELEASE.json last."""
    actual = sha256_file(artifact)
    if actual != checksum:
        raise ReleaseError(f"{artifact} on the host has sha256 {actual}, not {checksum}: the copy is damaged; "
                           "run the deploy again")
    dest = layout.release(build_id)
    os.makedirs(dest, 0o755)
    with open(os.path.join(dest, PARTIAL_MARKER), "w", encoding="utf-8") as fh:
        fh.write(f"install of {build_id} started {now()} by pid {os.getpid()}\n")
    unpack(artifact, dest)
    manifest = read_manifest(dest, build_id, artifact)
    build_venv(dest, python, manifest["install"], run)
    info = {
        "build_id": build_id,
        "commit": commit or manifest.get("commit", ""),
        "checksum": checksum,
        "artifact": os.path.basename(artifact),
        "installed_at": now(),
    }
    tmp = os.path.join(dest, f".{RELEASE_FILE}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(info, fh, indent=2, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, os.path.join(dest, RELEASE_FILE))
    os.unlink(os.path.join(dest, PARTIAL_MARKER))
    return info


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
