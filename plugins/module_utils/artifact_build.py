# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build a release artifact (format 1, see docs/apps.md) of any Python project, on the controller.

The app's wheel comes from the project's own build backend (pip wheel); every dependency is a wheel downloaded for
each target Python and platform; the dependency graph is then walked with the TARGET's markers and tags (pip
evaluates markers against the Python running it), so the wheelhouse holds exactly what each target installs, and a
requirement no wheel satisfies fails the build naming it. Entries, times and owners are fixed: the same inputs give
the same bytes. Used by the build_artifact module; pure logic apart from the pip runs it is handed.
"""

from __future__ import annotations

import email.parser
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
import zipfile
from typing import Callable

try:  # ansible-core depends on packaging: it is on every controller, where the builder runs
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.tags import compatible_tags, cpython_tags
    from packaging.utils import canonicalize_name, parse_wheel_filename
    PACKAGING_ERROR = ""
except ImportError as exc:
    PACKAGING_ERROR = str(exc)

from ansible_collections.sturdy.workers.plugins.module_utils.app_plan import APP_NAME, BUILD_ID

FORMAT = 1
# 1980-01-01, the earliest time a zip entry can hold: every file of the artifact carries it.
EPOCH = 315532800
FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
PYTHON = re.compile(r"^3\.[0-9]{1,2}$")
PLATFORM = re.compile(r"^(manylinux_2_([0-9]+)|musllinux_1_([0-9]+)|manylinux2014|linux)_([a-z0-9_]+)$")
# Left out of the copy of the project the wheel is built from: build output, environments, caches.
SKIPPED = (".venv", "venv", ".tox", ".nox", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
           ".mypy_cache", "node_modules")
NO_MATCH = re.compile(r"No matching distribution found for (\S+)")
# Runner(argv, env) -> (rc, stdout, stderr)
Runner = Callable[[list, dict], tuple]


class BuildError(Exception):
    """The build cannot give a correct artifact; the message names what and how to fix it."""


def check_inputs(app: str, build_id: str, pythons: list[str], platforms: list[str]) -> None:
    if not APP_NAME.match(app or ""):
        raise BuildError(f"app={app!r}: the app's name as sturdy_app gives it (a lowercase letter, then lowercase "
                         "letters, digits or -, at most 32)")
    if not BUILD_ID.match(build_id or ""):
        raise BuildError(f"build_id={build_id!r}: use 1-128 letters, digits and . _ + - (for example 2026.12.03-1)")
    bad = [p for p in pythons if not PYTHON.match(p)]
    if not pythons or bad:
        raise BuildError(f"python_versions={pythons!r}: name each Python the hosts run as major.minor, e.g. 3.11 "
                         "(Debian 12) and 3.13 (Debian 13)")
    bad = [p for p in platforms if not PLATFORM.match(p)]
    if not platforms or bad:
        raise BuildError(f"platforms={bad or platforms!r}: name the hosts' platform as a wheel tag, e.g. "
                         "manylinux_2_36_x86_64 (glibc 2.36, Debian 12) or manylinux_2_28_aarch64")


def expand_platforms(platforms: list[str]) -> list[str]:
    """Every platform tag a host of `platforms` accepts: manylinux_2_36 runs manylinux_2_17 wheels too (pip does
    not expand them for --platform)."""
    found: list[str] = []
    for platform in platforms:
        match = PLATFORM.match(platform)
        glibc, musl, arch = match.group(2), match.group(3), match.group(4)
        if glibc:
            found += [f"manylinux_2_{minor}_{arch}" for minor in range(int(glibc), 4, -1)]
            legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
            found += [f"{name}_{arch}" for minor, name in legacy.items() if int(glibc) >= minor]
        elif musl:
            found += [f"musllinux_1_{minor}_{arch}" for minor in range(int(musl), -1, -1)]
        else:
            found.append(platform)
        found.append(f"linux_{arch}")
    return list(dict.fromkeys(found))


def target_tags(python: str, platforms: list[str]) -> list:
    """The wheel tags CPython `python` on `platforms` installs, most specific first."""
    version = tuple(int(p) for p in python.split("."))
    expanded = expand_platforms(platforms)
    return list(dict.fromkeys([*cpython_tags(version, platforms=expanded),
                               *compatible_tags(version, interpreter=f"cp{version[0]}{version[1]}",
                                                platforms=expanded)]))


def target_environment(python: str, platform: str) -> dict:
    """Marker environment of CPython `python` on a Linux host of `platform`."""
    env = default_environment()
    arch = PLATFORM.match(platform).group(4)
    env.update(python_version=python, python_full_version=f"{python}.0", implementation_name="cpython",
               implementation_version=f"{python}.0", platform_python_implementation="CPython", os_name="posix",
               sys_platform="linux", platform_system="Linux", platform_machine=arch, platform_release="",
               platform_version="")
    return env


class Wheelhouse:
    """The wheels in a directory, by canonical name."""

    def __init__(self, path: str):
        self.path = path
        self.wheels: dict[str, list[tuple]] = {}
        for name in sorted(os.listdir(path)):
            if name.endswith(".whl"):
                dist, version, dummy, tags = parse_wheel_filename(name)
                self.wheels.setdefault(dist, []).append((version, tags, name))

    def best(self, req, tags: list) -> str | None:
        """The newest wheel that satisfies `req` and installs with `tags`."""
        wanted = set(tags)
        fits = [(v, n) for v, t, n in self.wheels.get(canonicalize_name(req.name), [])
                if req.specifier.contains(v, prereleases=True) and t & wanted]
        return max(fits)[1] if fits else None

    def requires(self, wheel: str) -> list[str]:
        return wheel_metadata(os.path.join(self.path, wheel)).get_all("Requires-Dist") or []


def wheel_metadata(path: str):
    with zipfile.ZipFile(path) as whl:
        meta = [n for n in whl.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        if len(meta) != 1:
            raise BuildError(f"{os.path.basename(path)} is not a wheel (no single *.dist-info/METADATA)")
        return email.parser.Parser().parsestr(whl.read(meta[0]).decode("utf-8"))


def closure(house: Wheelhouse, root: str, python: str, platform: str, platforms: list[str]):
    """(wheels `root` needs on the target, requirements no wheel satisfies) — the target's markers and tags."""
    env, tags = target_environment(python, platform), target_tags(python, platforms)
    needed: set[str] = set()
    missing: list[str] = []
    todo = [(Requirement(root), "")]
    seen: set[tuple[str, str]] = set()
    while todo:
        req, extra = todo.pop()
        if req.marker and not req.marker.evaluate({**env, "extra": extra}):
            continue
        wheel = house.best(req, tags)
        if wheel is None:
            bare = Requirement(str(req))
            bare.marker = None
            missing.append(str(bare))
            continue
        for want in [""] + sorted(req.extras):
            if (wheel, want) in seen:
                continue
            seen.add((wheel, want))
            needed.add(wheel)
            todo += [(Requirement(line), want) for line in house.requires(wheel)]
    return needed, sorted(set(missing))


def pip_target_args(python: str, platforms: list[str]) -> list[str]:
    major, minor = python.split(".")
    args = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp",
            "--abi", f"cp{major}{minor}", "--abi", "abi3", "--abi", "none"]
    for platform in expand_platforms(platforms):
        args += ["--platform", platform]
    return args


def no_wheel(out: str, python: str, platforms: list[str]) -> BuildError:
    """The build's failure for a requirement pip found no wheel for, naming it."""
    names = NO_MATCH.findall(out)
    what = ", ".join(dict.fromkeys(names)) or "a dependency"
    tail = "\n".join(out.strip().splitlines()[-8:])
    return BuildError(
        f"No wheel of {what} for Python {python} on {', '.join(platforms)}: the hosts install offline from wheels "
        f"only, so the build stops here, not the deploy. Pin a version that publishes a wheel for that Python and "
        f"platform (or build one and pass its directory in find_links), or drop the dependency.\n{tail}")


def normalize_wheel(data: bytes) -> bytes:
    """The same wheel with fixed times and permissions, entries in their order: build backends differ in both."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            entry = zipfile.ZipInfo(info.filename, FIXED_ZIP_TIME)
            entry.external_attr = (0o755 if (info.external_attr >> 16) & 0o111 else 0o644) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(entry, src.read(info))
    return out.getvalue()


def console_scripts(path: str) -> list[str]:
    with zipfile.ZipFile(path) as whl:
        names = [n for n in whl.namelist() if re.fullmatch(r"[^/]+\.dist-info/entry_points\.txt", n)]
        if not names:
            return []
        section, found = "", []
        for line in whl.read(names[0]).decode("utf-8").splitlines():
            line = line.strip()
            if line.startswith("["):
                section = line.strip("[]").strip()
            elif section == "console_scripts" and "=" in line:
                found.append(line.split("=", 1)[0].strip())
        return sorted(found)


def launcher(script: str) -> bytes:
    return (f'#!/bin/sh\n# {script} from this release\'s venv (built on the host from wheelhouse/).\n'
            f'exec "$(dirname "$0")/../venv/bin/{script}" "$@"\n').encode()


def write_tar(path: str, files: dict[str, tuple[bytes, int]]) -> None:
    """A .tar.gz of `files` (name -> (data, mode)), sorted, owned by root, every time EPOCH."""
    tmp = f"{path}.sturdy-tmp"
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=EPOCH) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name in sorted(files):
                data, mode = files[name]
                entry = tarfile.TarInfo(name)
                entry.size, entry.mode, entry.mtime = len(data), mode, EPOCH
                entry.uid = entry.gid = 0
                entry.uname = entry.gname = "root"
                tar.addfile(entry, io.BytesIO(data))
    os.replace(tmp, path)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build(project: str, app: str, build_id: str, pythons: list[str], platforms: list[str], run: Runner,
          pip: list[str], commit: str = "", constraints: str = "", pip_options: list[str] | None = None) -> dict:
    """Build the artifact's files: {'files': name -> (data, mode), 'manifest': dict, 'steps': [argv]}.
    `pip` is the argv that runs pip; `pip_options` (index, find-links) go to every pip run."""
    check_inputs(app, build_id, pythons, platforms)
    if not any(os.path.isfile(os.path.join(project, f)) for f in ("pyproject.toml", "setup.cfg", "setup.py")):
        raise BuildError(f"project={project} has no pyproject.toml, setup.cfg or setup.py: point it at the directory "
                         "pip builds the app's wheel from")
    if constraints and not os.path.isfile(constraints):
        raise BuildError(f"constraints={constraints} is not a file: give the project's lock or requirements file "
                         "(name==version lines)")
    options = list(pip_options or [])
    env = {"SOURCE_DATE_EPOCH": str(EPOCH), "PYTHONHASHSEED": "0", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PIP_NO_INPUT": "1"}
    steps = []

    def pip_run(args: list[str], python: str = "") -> str:
        argv = [*pip, *args, *options]
        steps.append(argv)
        rc, out, err = run(argv, env)
        if rc != 0:
            if python and NO_MATCH.search(out + err):
                raise no_wheel(out + err, python, platforms)
            tail = "\n".join((out + err).strip().splitlines()[-15:])
            raise BuildError(f"{' '.join(str(a) for a in argv[:6])} ... failed (rc {rc}):\n{tail}")
        return out

    with tempfile.TemporaryDirectory(prefix="sturdy-build-") as tmp:
        built, house = os.path.join(tmp, "app"), os.path.join(tmp, "wheelhouse")
        os.makedirs(built)
        os.makedirs(house)
        # From a copy: an in-tree build writes build/ and *.egg-info into the checkout, and what an earlier build left
        # there (a deleted module still in build/lib) would end up in this one.
        source = os.path.join(tmp, "source")
        shutil.copytree(project, source, symlinks=True, ignore=shutil.ignore_patterns(*SKIPPED))
        pip_run(["wheel", "--no-deps", "--no-cache-dir", "--wheel-dir", built, source])
        made = [n for n in os.listdir(built) if n.endswith(".whl")]
        if len(made) != 1:
            raise BuildError(f"pip wheel made {made or 'no wheel'} from {project}, expected the app's one wheel")
        dist, version, dummy, tags = parse_wheel_filename(made[0])
        with open(os.path.join(built, made[0]), "rb") as fh:
            app_wheel = normalize_wheel(fh.read())
        with open(os.path.join(house, made[0]), "wb") as fh:
            fh.write(app_wheel)
        root = f"{dist}=={version}"
        meta = wheel_metadata(os.path.join(house, made[0]))
        requires_python = meta.get("Requires-Python") or ""
        for python in pythons:
            if requires_python and not SpecifierSet(requires_python).contains(f"{python}.0"):
                raise BuildError(f"{dist} {version} requires Python {requires_python} (Requires-Python), which "
                                 f"python_versions={python} is not: fix python_versions or the project's "
                                 "requires-python")
        extra = ["-c", os.path.abspath(constraints)] if constraints else []
        needed: set[str] = {made[0]}
        for python in pythons:
            # Dependencies as pip resolves them for this target; then anything the target's own markers add.
            pip_run(["download", "--no-cache-dir", "--dest", house, "--find-links", house,
                     *pip_target_args(python, platforms), *extra, root], python)
            for platform in platforms:
                for dummy in range(20):
                    wheels, missing = closure(Wheelhouse(house), root, python, platform, platforms)
                    if not missing:
                        break
                    pip_run(["download", "--no-cache-dir", "--no-deps", "--dest", house,
                             *pip_target_args(python, [platform]), *extra, *missing], python)
                else:
                    raise BuildError(f"the dependencies of {root} for Python {python} did not settle: {missing}")
                needed |= wheels
        files: dict[str, tuple[bytes, int]] = {}
        for name in sorted(needed):
            with open(os.path.join(house, name), "rb") as fh:
                files[f"wheelhouse/{name}"] = (fh.read(), 0o644)
        scripts = console_scripts(os.path.join(house, made[0]))
    for script in scripts:
        files[f"bin/{script}"] = (launcher(script), 0o755)
    manifest = {
        "format": FORMAT,
        "app": app,
        "build_id": build_id,
        "commit": commit,
        "python_requires": requires_python,
        "pythons": list(pythons),
        "platforms": list(platforms),
        "install": [root],
        "commands": {script: f"bin/{script}" for script in scripts},
        "wheels": {name.split("/", 1)[1]: sha256(data) for name, (data, mode) in files.items()
                   if name.startswith("wheelhouse/")},
    }
    files["MANIFEST.json"] = (json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n", 0o644)
    return {"files": files, "manifest": manifest, "steps": steps}


def write(dest: str, app: str, build_id: str, files: dict[str, tuple[bytes, int]]) -> dict:
    """Write <dest>/<app>-<build_id>.tar.gz and its .sha256 unless the same bytes are there. Refuses other bytes
    under the same build ID (a build ID names one artifact)."""
    os.makedirs(dest, exist_ok=True)
    path = os.path.join(dest, f"{app}-{build_id}.tar.gz")
    with tempfile.TemporaryDirectory(dir=dest, prefix=".sturdy-build-") as tmp:
        fresh = os.path.join(tmp, "artifact.tar.gz")
        write_tar(fresh, files)
        with open(fresh, "rb") as fh:
            digest = sha256(fh.read())
        changed = True
        if os.path.exists(path):
            with open(path, "rb") as fh:
                old = sha256(fh.read())
            if old != digest:
                raise BuildError(
                    f"{path} exists with sha256 {old}; this build of {build_id} gives {digest}. A build ID names one "
                    "artifact: give this build its own ID, or remove the old file if it was never deployed")
            changed = False
        else:
            shutil.move(fresh, path)
    line = f"{digest}  {os.path.basename(path)}\n"
    try:
        with open(f"{path}.sha256", encoding="utf-8") as fh:
            published = fh.read()
    except FileNotFoundError:
        published = ""
    if published != line:
        with open(f"{path}.sha256", "w", encoding="utf-8") as fh:
            fh.write(line)
        changed = True
    return {"path": path, "sha256": digest, "changed": changed}
