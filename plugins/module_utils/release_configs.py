# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A release is a build and its config. The build is /srv/<app>/releases/<build>/ (module_utils/releases.py); the
config of each release lives beside the app's secrets, root-owned, and is written once:

    /etc/<app>/releases/<release>/RELEASE.json   what the release is: build, declaration, secrets generation, when
                                                 it went live, the migrations that ran with it
    /etc/<app>/releases/<release>/units/         the app's unit files exactly as its units run them
    /etc/<app>/secrets/<n>/                      one generation of secret values (an environment file, credentials),
                                                 named by the units of every release that uses it
    /etc/<app>/current, previous                 links to the live release and the one live before it
    /etc/<app>/<app>.env, /etc/<app>/credentials links to the live release's secrets, for what runs beside the units
                                                 (status, diagnose, the smoke client: the app as it runs now)

Installing a release writes new directories only, so a refused deploy changes nothing the running units read. The
switch writes the release's unit files into systemd's directory and re-points the links, code and config together;
a unit whose file named the old release's generation or build now names the new one's. A release is named after
its build; a second config of the same build is <build>~2, and so on. Pure functions over the file system, no
Ansible imports: the release_config module runs them, the unit tests call them directly.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import stat
from typing import Callable

from ansible_collections.sturdy.workers.plugins.module_utils.files import own_directory, replace_file, same_file
from ansible_collections.sturdy.workers.plugins.module_utils.names import RELEASE_FILE
from ansible_collections.sturdy.workers.plugins.module_utils.releases import Layout

FORMAT = 1
UNITS_DIR = "units"
# In a generation's directory, root-only: a digest of the values (to reuse a generation for the same values) and,
# last, the mark that the generation is complete.
DIGEST_FILE = ".sha256"
SEPARATOR = "~"
# A release name: the build ID (letters, digits, . _ + -) and, from the second config of that build on, ~<serial>.
NAME = re.compile(r"^([A-Za-z0-9._+-]{1,128})(?:~([1-9][0-9]{0,5}))?$")
GENERATION = re.compile(r"^[1-9][0-9]{0,8}$")


class ConfigError(Exception):
    """Something the operator must know; the message names the release and the next step, never a secret value."""


def release_name(build_id: str, serial: int) -> str:
    return build_id if serial <= 1 else f"{build_id}{SEPARATOR}{serial}"


def parse_name(name: str) -> tuple[str, int]:
    found = NAME.match(name or "")
    if not found:
        raise ConfigError(f"{name!r} is not a release name: a build ID, or a build ID and ~<n> (2026.12.03-1~2)")
    return found[1], int(found[2] or 1)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ConfigLayout:
    """Where one app's release configs, secret generations and links live."""

    def __init__(self, app: str, base: str = ""):
        self.app = app
        self.base = base or f"/etc/{app}"
        self.releases = f"{self.base}/releases"
        self.secrets = f"{self.base}/secrets"
        self.current = f"{self.base}/current"
        self.previous = f"{self.base}/previous"
        self.live_env = f"{self.base}/{app}.env"
        self.live_credentials = f"{self.base}/credentials"

    def release(self, name: str) -> str:
        return f"{self.releases}/{name}"

    def generation(self, number: int) -> str:
        return f"{self.secrets}/{int(number)}"

    def link(self, link: str) -> str | None:
        """The release a link names, or None."""
        try:
            target = os.readlink(link)
        except OSError:
            return None
        parent, name = os.path.split(os.path.normpath(os.path.join(self.base, target)))
        if parent != self.releases or not NAME.match(name):
            raise ConfigError(f"{link} points at {target}, which is not a release under {self.releases}/; remove it "
                              "and deploy again")
        return name


def read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    return data if isinstance(data, dict) else None


def write_json(path: str, data: dict, mode: int = 0o644) -> None:
    replace_file(path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode("utf-8"), mode)


def records(layout: ConfigLayout) -> list[dict]:
    """Every complete release config, oldest first (a directory without its record is an interrupted install)."""
    try:
        names = os.listdir(layout.releases)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        if NAME.match(name):
            data = read_json(f"{layout.release(name)}/{RELEASE_FILE}")
            if data and data.get("name") == name:
                found.append(data)
    return sorted(found, key=lambda r: (r.get("created", ""), r["name"]))


def record(layout: ConfigLayout, name: str) -> dict:
    data = read_json(f"{layout.release(name)}/{RELEASE_FILE}")
    if not data:
        raise ConfigError(f"release {name} has no record under {layout.releases}/; deploy it again")
    return data


def summary(rec: dict) -> dict:
    """What the controller needs of a release to list, name and choose it: no units' content."""
    return {key: rec.get(key) for key in ("name", "build_id", "serial", "created", "digest", "activated",
                                          "migrations", "adopted", "secrets")}


# Secrets ------------------------------------------------------------------------------------------------------------

def secrets_digest(delivery: str, values: dict) -> str:
    """One digest of the secret values as a delivery writes them (a generation is reused for the same values)."""
    text = json.dumps({"delivery": delivery, "values": {str(k): "" if v is None else str(v)
                                                        for k, v in (values or {}).items()}}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def generations(layout: ConfigLayout) -> dict[int, str]:
    """Complete generations: number -> digest of their values."""
    try:
        names = os.listdir(layout.secrets)
    except FileNotFoundError:
        return {}
    found = {}
    for name in names:
        if GENERATION.match(name):
            try:
                with open(f"{layout.generation(int(name))}/{DIGEST_FILE}", encoding="ascii") as fh:
                    found[int(name)] = fh.read().strip()
            except OSError:
                continue
    return found


def choose_generation(layout: ConfigLayout, digest: str) -> tuple[int, bool]:
    """The generation holding values with `digest` (reused), else the next number; and whether it is new."""
    have = generations(layout)
    for number in sorted(have, reverse=True):
        if have[number] == digest:
            return number, False
    highest = max([0, *have, *(int(n) for n in _listdir(layout.secrets) if GENERATION.match(n))])
    return highest + 1, True


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


Encrypt = Callable[[str, str], bytes]


def repair_generation(where: str, files: list[tuple[str, bytes | None, int, int]], check: bool) -> bool:
    """A complete generation's files given their content, owner and mode again where they were changed by hand (a
    secret made world-readable is a difference, not a new generation). Content None: owner and mode only (an
    encrypted credential, which encrypts differently every time)."""
    changed = False
    for relative, data, gid, mode in files:
        path = os.path.join(where, relative)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if data is None:
            if st is not None and (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) != (0, gid, mode):
                changed = True
                if not check:
                    os.chown(path, 0, gid)
                    os.chmod(path, mode)
        elif not same_file(path, data, mode, gid):
            changed = True
            if not check:
                replace_file(path, data, mode, gid)
    return changed


def write_generation(layout: ConfigLayout, number: int, files: list[tuple[str, bytes | None, int, int]], digest: str,
                     check: bool) -> bool:
    """Write generation `number` (files: path inside it, content, group ID, mode; root's) once. An incomplete one (no
    digest, left by an interrupted deploy) is written again; a complete one keeps its values, its files given their
    content, owner and mode again where they were changed by hand."""
    where = layout.generation(number)
    if os.path.isfile(f"{where}/{DIGEST_FILE}"):
        return repair_generation(where, files, check)
    if check:
        return True
    own_directory(layout.base, 0o755, False, parents=True)
    own_directory(layout.secrets, 0o755, False)
    if os.path.lexists(where):
        shutil.rmtree(where)
    os.mkdir(where, 0o755)
    os.chown(where, 0, 0)
    for relative, data, gid, mode in files:
        path = os.path.join(where, relative)
        if os.path.dirname(relative):
            own_directory(os.path.dirname(path), 0o700, False)
        replace_file(path, data, mode, gid)
    replace_file(f"{where}/{DIGEST_FILE}", (digest + "\n").encode("ascii"), 0o600)
    return True


# Releases -----------------------------------------------------------------------------------------------------------

def config_digest(units: dict[str, str], config: dict) -> str:
    """What makes two configs of a build the same release: the unit files (which name the secrets' generation) and
    the declaration."""
    text = json.dumps({"units": units, "config": config}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stage(layout: ConfigLayout, name: str, build_id: str, units: dict[str, str], config: dict, meta: dict,
          check: bool) -> tuple[str, bool]:
    """Install the config of release `name` (units and record), or find the release of `build_id` that has it
    already; (its name, whether it was created). Nothing live changes."""
    digest = config_digest(units, config)
    for rec in reversed(records(layout)):
        if rec.get("build_id") == build_id and rec.get("digest") == digest:
            return rec["name"], False
    found_build, serial = parse_name(name)
    if found_build != build_id:
        raise ConfigError(f"release {name} is not a release of build {build_id}")
    final = layout.release(name)
    if os.path.lexists(final) and read_json(f"{final}/{RELEASE_FILE}"):
        # Taken here (a live state recorded just now, a host that ran more configs of the build than the others):
        # the next serial of the build on this host.
        serial = max(parse_name(r["name"])[1] for r in records(layout) if r.get("build_id") == build_id) + 1
        name = release_name(build_id, serial)
        final = layout.release(name)
    if check:
        return name, True
    own_directory(layout.base, 0o755, False, parents=True)
    own_directory(layout.releases, 0o755, False)
    staging = f"{layout.releases}/.staging-{name}"
    for path in (staging, final):
        if os.path.lexists(path):
            shutil.rmtree(path)
    os.mkdir(staging, 0o755)
    os.mkdir(f"{staging}/{UNITS_DIR}", 0o755)
    for unit, content in sorted(units.items()):
        if "/" in unit or unit.startswith("."):
            raise ConfigError(f"{unit!r} is not a unit file name")
        replace_file(f"{staging}/{UNITS_DIR}/{unit}", content.encode("utf-8"), 0o644)
    data = {"format": FORMAT, "name": name, "build_id": build_id, "serial": serial, "created": now(),
            "digest": digest, "units": sorted(units), "activated": [], "migrations": [], **config, **meta}
    write_json(f"{staging}/{RELEASE_FILE}", data)
    os.rename(staging, final)
    return name, True


def units_of(layout: ConfigLayout, name: str) -> dict[str, str]:
    where = f"{layout.release(name)}/{UNITS_DIR}"
    found = {}
    for unit in sorted(_listdir(where)):
        with open(f"{where}/{unit}", encoding="utf-8") as fh:
            found[unit] = fh.read()
    return found


def resolve(layout: ConfigLayout, to: str, exact: bool = False) -> dict:
    """The release `to` names (a build ID: its release live most recently; <build>~<n>: that one), or the previous one when
    `to` is empty; with `exact`, the release named `to` alone. Refused, naming the kept releases, when there is
    none."""
    kept = records(layout)
    names = ", ".join(r["name"] for r in reversed(kept)) or "none"
    current = layout.link(layout.current)
    if not to:
        previous = layout.link(layout.previous)
        if not previous:
            raise ConfigError(f"no previous release is recorded here (current is {current or 'none'}; a rollback "
                              f"clears it). Kept releases, newest first: {names}. Roll back to one of them with "
                              "-e sturdy_rollback_to=<release or build>")
        to, exact = previous, True
    # A build ID names its newest kept release (the first config of a build is named like it: <build>~1 names that
    # one alone); <build>~<n> names one release.
    if exact:
        chosen = [r for r in kept if r["name"] == to]
    elif to.endswith(f"{SEPARATOR}1"):
        to = to[:-2]
        chosen = [r for r in kept if r["name"] == to]
    else:
        of_build = [r for r in kept if r.get("build_id") == to]
        # A build's releases that ran: one whose deploy was refused, or that a rollback left, is named exactly or not
        # at all.
        # The one of them live most recently.
        chosen = sorted((r for r in of_build if not _failed(r)), key=lambda r: max(
            a.get("at", "") for a in r["activated"])) if of_build else [r for r in kept if r["name"] == to]
        if of_build and not chosen:
            raise ConfigError(f"build {to} has no release here that went live and stayed: "
                              f"{', '.join(r['name'] for r in reversed(of_build))} never went live or were rolled "
                              "back from. Name one exactly with -e sturdy_rollback_to=<release> if you mean it, or "
                              f"deploy the build again. Kept releases, newest first: {names}")
    if chosen:
        return chosen[-1]
    raise ConfigError(f"release {to} is not kept here (pruned, or never installed). Kept releases, newest first: "
                      f"{names}. Roll back to one of them with -e sturdy_rollback_to=<release or build>, or deploy "
                      "the build again")


def migrations_since(layout: ConfigLayout, target: dict) -> list[dict]:
    """The migrations that ran after `target` last went live (or was installed, if it never did): each with the
    release it belongs to. A rollback does not undo them; it says so."""
    since = (target.get("activated") or [{}])[-1].get("at") or target.get("created", "")
    found = []
    for rec in records(layout):
        if rec["name"] == target["name"]:
            continue
        for ran in rec.get("migrations") or []:
            if ran.get("at", "") > since:
                found.append({"release": rec["name"], **ran})
    return sorted(found, key=lambda m: m.get("at", ""))


def annotate(layout: ConfigLayout, name: str, key: str, entry: dict, check: bool) -> bool:
    """Append `entry` to the list `key` (activated, migrations) of a release's record."""
    rec = record(layout, name)
    if entry in (rec.get(key) or []):
        return False
    if not check:
        rec[key] = [*(rec.get(key) or []), entry]
        write_json(f"{layout.release(name)}/{RELEASE_FILE}", rec)
    return True


def _point(link: str, target: str | None, check: bool) -> bool:
    """Point `link` at `target` atomically (a temporary link renamed over it; a directory in its place, a legacy
    credential store, is moved aside first), or remove it when `target` is None."""
    try:
        st = os.lstat(link)
    except FileNotFoundError:
        st = None
    if target is None:
        if st is None:
            return False
        if not check:
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(link)
            else:
                os.unlink(link)
        return True
    if st is not None and stat.S_ISLNK(st.st_mode) and os.readlink(link) == target:
        return False
    if not check:
        tmp = f"{link}.sturdy-link"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(target, tmp)
        if st is not None and stat.S_ISDIR(st.st_mode):
            aside = f"{link}.sturdy-old"
            if os.path.lexists(aside):
                shutil.rmtree(aside)
            os.rename(link, aside)
            os.rename(tmp, link)
            shutil.rmtree(aside)
        else:
            os.replace(tmp, link)
    return True


def point_secrets(layout: ConfigLayout, generation: int | None, check: bool) -> list[str]:
    """The live secret paths as links into `generation` (what it holds: an environment file, credentials);
    removed where it holds none. The paths changed."""
    where = layout.generation(generation) if generation else None
    rel = f"secrets/{int(generation)}" if generation else ""
    changed = []
    for live, inside in ((layout.live_env, f"{layout.app}.env"), (layout.live_credentials, "credentials")):
        target = f"{rel}/{inside}" if where and os.path.lexists(f"{where}/{inside}") else None
        if _point(live, target, check):
            changed.append(live)
    return changed


def activate(layout: ConfigLayout, name: str, code: Layout, previous: str | None,
             write_units: Callable[[dict[str, str]], list[str]], check: bool) -> dict:
    """Make release `name` live: its unit files written where systemd reads them (`write_units` writes those that
    differ and returns their names, without reloading), the live secrets and the links re-pointed, code and config
    together (`previous`: the release to name as previous, or None to clear it). The caller reloads systemd when
    units were written: from then on every start of a unit runs this release's build with its config."""
    rec = record(layout, name)
    before = layout.link(layout.current)
    before_build = os.path.basename(os.readlink(code.current)) if os.path.islink(code.current) else None
    previous_build = record(layout, previous)["build_id"] if previous else None
    written = write_units(units_of(layout, name))
    changed = bool(written)
    changed = bool(point_secrets(layout, (rec.get("secrets") or {}).get("generation"), check)) or changed
    for link, target in ((code.previous, f"releases/{previous_build}" if previous_build else None),
                         (code.current, f"releases/{rec['build_id']}"),
                         (layout.previous, f"releases/{previous}" if previous else None),
                         (layout.current, f"releases/{name}")):
        changed = _point(link, target, check) or changed
    return {"changed": changed, "written": written, "release": name, "build_id": rec["build_id"], "from": before,
            "from_build": before_build, "previous": previous, "record": rec}


def went_live_at(rec: dict) -> float | None:
    """When release `rec` last went live (seconds since the epoch), None when it never did."""
    went = [a["at"] for a in rec.get("activated") or [] if a.get("at")]
    if not went:
        return None
    return datetime.datetime.strptime(max(went), "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def _failed(rec: dict) -> bool:
    """A release that never went live (its deploy was refused), or that a rollback left since it last did."""
    went = [a.get("at", "") for a in rec.get("activated") or []]
    left = [a.get("at", "") for a in rec.get("abandoned") or []]
    return not went or bool(left and max(left) >= max(went))


def prune(layout: ConfigLayout, keep: int, protected: set[str], kept_builds: set[str] | None,
          generations_in_use: set[int], check: bool) -> list[str]:
    """Remove release configs beyond the `keep` newest that went live, those that never did or that a rollback left,
    and those whose build is gone (`kept_builds`, None: not known), never a protected one (current, previous, the one being deployed, one
    whose build a process runs); then
    every generation of secrets no kept release and no unit file on the host names. The names removed."""
    kept = records(layout)
    # A release that never went live (its deploy was refused) or that a rollback left is nothing to go back to: it
    # goes first, so that failed deploys do not push the releases that ran out of `keep`.
    ran = [r["name"] for r in reversed(kept) if not _failed(r)]
    never = [r["name"] for r in kept if _failed(r)]
    gone = [r["name"] for r in kept if kept_builds is not None and r.get("build_id") not in kept_builds]
    drop = [n for n in ran[keep:] if keep > 0] + never + gone
    removed = sorted({n for n in drop if n not in protected})
    if not check:
        for name in removed:
            shutil.rmtree(layout.release(name))
        for staging in _listdir(layout.releases):
            if staging.startswith(".staging-"):
                shutil.rmtree(f"{layout.releases}/{staging}")
    used = {(r.get("secrets") or {}).get("generation") for r in kept if r["name"] not in removed}
    for name in sorted((n for n in _listdir(layout.secrets) if GENERATION.match(n)), key=int):
        if int(name) not in used and int(name) not in generations_in_use:
            removed.append(f"secrets/{name}")
            if not check:
                shutil.rmtree(layout.generation(int(name)))
    return removed


_GENERATION_IN_UNIT = re.compile(r"/secrets/([1-9][0-9]{0,8})/")


def generations_named(texts: list[str], base: str) -> set[int]:
    """The generations the given unit files name (a unit not yet switched keeps its own)."""
    found = set()
    for text in texts:
        for line in text.splitlines():
            if line.startswith(("EnvironmentFile=", "LoadCredential=", "LoadCredentialEncrypted=")) and base in line:
                found.update(int(m) for m in _GENERATION_IN_UNIT.findall(line))
    return found


def legacy_secret_files(layout: ConfigLayout) -> list[tuple[str, bytes, int, int]]:
    """The secret files a host deployed before release configs holds at the live paths (regular files, not links):
    path inside a generation, content, group, mode. Empty when the live paths are links already."""
    found = []
    try:
        st = os.lstat(layout.live_env)
        if stat.S_ISREG(st.st_mode):
            with open(layout.live_env, "rb") as fh:
                found.append((f"{layout.app}.env", fh.read(), st.st_gid, stat.S_IMODE(st.st_mode)))
    except FileNotFoundError:
        pass
    if os.path.isdir(layout.live_credentials) and not os.path.islink(layout.live_credentials):
        for name in sorted(os.listdir(layout.live_credentials)):
            path = f"{layout.live_credentials}/{name}"
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as fh:
                    found.append((f"credentials/{name}", fh.read(), st.st_gid, stat.S_IMODE(st.st_mode)))
    return found


def adopt(layout: ConfigLayout, build_id: str, units: dict[str, str], config: dict, meta: dict,
          check: bool, reserved: set | None = None) -> str | None:
    """On a host deployed before release configs: record what runs now as a release of the live build (its unit
    files as they are, its secret files copied into a generation of their own), so that a rollback can go back to
    it. Nothing live changes; the first switch replaces the live secret files with links. Write the new release's
    generation first (or name it in `reserved`): the copy takes the next free number. The release's name, or None
    when there is nothing to adopt (a config is live already, or nothing was deployed)."""
    if layout.link(layout.current) or not build_id or not units:
        return None
    existing = [r for r in records(layout) if r.get("adopted")]
    if existing:
        return existing[-1]["name"]
    files = legacy_secret_files(layout)
    generation = None
    if files:
        digest = "adopted:" + hashlib.sha256(b"".join(f[1] for f in files)).hexdigest()
        generation, dummy = choose_generation(layout, digest)
        while generation in (reserved or set()):  # a check run wrote the new release's generation nowhere
            generation += 1
        write_generation(layout, generation, files, digest, check)
    serials = [parse_name(r["name"])[1] for r in records(layout) if r.get("build_id") == build_id]
    name = release_name(build_id, max([0, *serials]) + 1)
    secrets = {**(config.get("secrets") or {}), "generation": generation}
    name, dummy = stage(layout, name, build_id, units, {**config, "secrets": secrets},
                        {**meta, "adopted": True}, check)
    if not check:
        # Live already: it was, before this deploy; kept as a release that ran.
        annotate(layout, name, "activated", {"at": now(), "kind": "adopted"}, False)
        _point(layout.current, f"releases/{name}", False)
    return name
