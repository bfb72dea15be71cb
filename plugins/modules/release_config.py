#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: release_config
short_description: A release's config (unit files, declaration, secrets) installed beside the live one, switched with it
version_added: 0.5.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - A release is a build and its config. The config of each release lives under C(/etc/<app>/releases/<release>/)
    (its C(RELEASE.json) and the app's unit files exactly as its units run them); its secret values in a generation
    C(/etc/<app>/secrets/<n>/) that the unit files name, written once. C(/etc/<app>/current) and C(previous) name
    the live release and the one before; C(/etc/<app>/<app>.env) and C(/etc/<app>/credentials) are links to the
    live release's secrets, for what runs beside the units (status, the smoke client).
  - O(state=query) lists the releases kept, the live one and the previous one; with O(secrets), the generation those
    values would use (one holding the same values is reused); with O(resolve), the release O(to) names (a release,
    a build ID, or empty for the previous release), refused with the kept releases named. It changes nothing.
  - O(state=present) installs release O(name) of O(build_id) - the secret generation O(generation) (written once, when
    missing), the unit files O(units) (each checked by C(systemd-analyze verify) first) and the record. A release of
    the build with the same unit files and declaration is reused instead (RV(name) says which). Nothing the live
    units read changes. A host deployed before release configs first gets its live state recorded as a release of
    its live build (RV(adopted)), so that a rollback can go back to it. Then the releases beyond O(keep) and those
    whose build is gone are removed (never the live, the previous or the new one, nor one whose build a process
    runs), and every generation no kept release and no unit file names.
  - O(state=current) makes release O(name) live - its unit files written where systemd reads them, systemd reloaded,
    the live secrets and the C(current) links (code and config) re-pointed - and names the release live before as
    previous. O(state=rolled_back) does the same for the release O(to) names (empty - the previous one) and clears
    previous, so that a second rollback names its target; RV(migrations) lists the migrations that ran since that
    release was live (a rollback does not undo them).
  - O(state=annotate) appends O(entry) to the O(key) list of release O(name)'s record (the migrations that ran).
options:
  app:
    description: The application's name; its config lives under C(/etc/<app>).
    type: str
    required: true
  root:
    description: The app's directory holding C(releases/) and C(current) (the builds). Empty means C(/srv/<app>).
    type: path
  state:
    description: What to do; see the description.
    type: str
    choices: [query, present, current, rolled_back, annotate]
    default: query
  name:
    description:
      - The release (O(state=present), O(state=current), O(state=annotate)); with O(state=rolled_back), the release to
        go back to by its exact name (a deploy's own rollback), instead of O(to).
    type: str
  build_id:
    description: With O(state=present), the build the release runs (installed under O(root)).
    type: str
  to:
    description: The release or build to go to with O(state=rolled_back) or O(resolve); empty means the previous release.
    type: str
    default: ""
  resolve:
    description: With O(state=query), resolve O(to) and fail when it names no kept release.
    type: bool
    default: false
  delivery:
    description: How the secrets reach the units (C(env_file), C(credentials), C(encrypted_credentials)).
    type: str
    choices: [env_file, credentials, encrypted_credentials]
    default: env_file
  secrets:
    description:
      - The secret values. With O(state=query), to find a generation holding them; with O(state=present), written
        into O(generation) when it is not there yet. Never returned or shown.
    type: dict
  group:
    description: The group that may read the environment file of a generation.
    type: str
  generation:
    description: With O(state=present), the secrets generation the unit files O(units) name (none without secrets).
    type: int
  units:
    description:
      - With O(state=present), unit file name to content. With O(state=current) in check mode, when the release is
        not installed (a check run installs nothing), the units compared with those on the host to tell what the
        switch would write.
    type: dict
    default: {}
  config:
    description: With O(state=present), the declaration recorded with the release (and compared to reuse one).
    type: dict
    default: {}
  meta:
    description: With O(state=present), O(state=current) and O(state=rolled_back), facts about the run recorded with it.
    type: dict
    default: {}
  adopt:
    description:
      - With O(state=present), the declaration to record for the live state of a host deployed before release configs
        (its unit files are read from O(unit_dir), its secret files copied); empty adopts nothing.
    type: dict
    default: {}
  marker:
    description: The line that marks the app's unit files (for O(adopt)).
    type: str
    default: ""
  keep:
    description: With O(state=present), how many newest releases to keep; C(0) keeps all.
    type: int
    default: 0
  key:
    description: With O(state=annotate), the list to append to.
    type: str
    choices: [migrations]
    default: migrations
  entry:
    description: With O(state=annotate), what to append.
    type: dict
    default: {}
  unit_dir:
    description: Where systemd reads the app's unit files.
    type: path
    default: /etc/systemd/system
extends_documentation_fragment:
  - sturdy.workers.systemd
attributes:
  check_mode:
    support: full
    description: Reports what would be installed, switched or removed; changes nothing.
  diff_mode:
    support: full
    description: Shows the live and previous release before and after.
notes:
  - Run as root.
"""

EXAMPLES = r"""
- name: Which releases are kept here, and which generation holds these secrets
  sturdy.workers.release_config:
    app: shop
    delivery: env_file
    secrets: "{{ sturdy_secrets }}"
  register: releases

- name: Go back to build 2026.12.03-1's newest release
  sturdy.workers.release_config:
    app: shop
    state: rolled_back
    to: 2026.12.03-1
"""

RETURN = r"""
releases:
  description: The kept releases, oldest first (C(name), C(build_id), C(serial), C(created), C(activated), C(migrations)).
  returned: always
  type: list
  elements: dict
current:
  description: The live release afterwards (none before the first deploy).
  returned: always
  type: str
previous:
  description: The release named previous afterwards.
  returned: always
  type: str
generation:
  description: With O(secrets) and O(state=query), C(number) (the generation for them) and C(new) (to be written).
  returned: when O(secrets) is given with O(state=query)
  type: dict
target:
  description:
    - The release resolved (O(resolve), O(state=rolled_back)), with its C(declared) process types; none when the host
      has no release config (deployed before them; its rollback goes by the build links alone).
  returned: when resolved
  type: dict
live:
  description: With O(state=query), the live release with its C(declared) process types and C(singleton_host).
  returned: when a release is live
  type: dict
name:
  description: The release installed or reused (O(state=present)), or made live.
  returned: with O(state=present), O(state=current) or O(state=rolled_back)
  type: str
created:
  description: With O(state=present), whether a new release was written (false when one with this config was there).
  returned: with O(state=present)
  type: bool
adopted:
  description: With O(state=present), the release recorded for a host's live state from before release configs.
  returned: with O(state=present)
  type: str
removed:
  description: Releases and secret generations removed (O(state=present)).
  returned: with O(state=present)
  type: list
  elements: str
written:
  description: Unit files written (O(state=current), O(state=rolled_back)).
  returned: with O(state=current) or O(state=rolled_back)
  type: list
  elements: str
at:
  description:
    - The host's time (seconds since the epoch) once the release was live and systemd reloaded. A main process that
      started before it was started from the units live before.
  returned: with O(state=current) or O(state=rolled_back)
  type: float
at_monotonic:
  description: RV(at) on the host's monotonic clock (systemd's C(ExecMainStartTimestampMonotonic), in seconds).
  returned: with O(state=current) or O(state=rolled_back)
  type: float
live_since:
  description:
    - When the release made live was last live before (seconds since the epoch); null when it never was. A main
      process started between it and a later switch away runs that release's units.
  returned: with O(state=current) or O(state=rolled_back)
  type: float
from:
  description: The release live before (O(state=current), O(state=rolled_back)).
  returned: with O(state=current) or O(state=rolled_back)
  type: str
migrations:
  description: With O(state=rolled_back), the migrations that ran since the release went back to was live.
  returned: with O(state=rolled_back)
  type: list
  elements: dict
"""

import glob
import grp
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sturdy.workers.plugins.module_utils.release_configs import (
    DIGEST_FILE,
    ConfigError,
    ConfigLayout,
    activate,
    adopt,
    annotate,
    choose_generation,
    generations_named,
    migrations_since,
    now,
    prune,
    record,
    records,
    resolve,
    secrets_digest,
    stage,
    summary,
    went_live_at,
    write_generation,
)
from ansible_collections.sturdy.workers.plugins.module_utils.releases import Layout, in_use, installed
from ansible_collections.sturdy.workers.plugins.module_utils.secret_delivery import (
    SecretSpecError,
    env_file,
)
from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import ENV
from ansible_collections.sturdy.workers.plugins.module_utils.unit_files import UnitFileError, differing, verify, write


def app_unit_files(unit_dir: str, app: str, marker: str) -> dict[str, str]:
    """The app's unit files in `unit_dir` that carry its marker: name -> content."""
    found = {}
    for path in sorted(glob.glob(f"{unit_dir}/{app}-*@.service") + glob.glob(f"{unit_dir}/{app}-*@.socket")
                       + [f"{unit_dir}/{app}.target"]):
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            continue
        if not marker or marker in text.splitlines():
            found[os.path.basename(path)] = text
    return found


def secret_files(module: AnsibleModule, app: str, delivery: str, values: dict, group: str | None,
                 encrypt: bool = True) -> list[tuple]:
    """The files of a generation for `values`: path inside it, content, group ID, mode (without `encrypt`, encrypted
    credentials with no content: only their owner and mode are checked)."""
    if delivery == "env_file":
        if not values:
            return []
        try:
            gid = grp.getgrnam(group).gr_gid if group else 0
        except KeyError:
            rc, dummy, err = module.run_command([module.get_bin_path("groupadd", required=True), "--system", "--",
                                                 group])
            if rc != 0:
                raise ConfigError(f"groupadd --system {group} failed (rc {rc}): {err.strip()}") from None
            gid = grp.getgrnam(group).gr_gid
        return [(f"{app}.env", env_file(values).encode("utf-8"), gid, 0o640)]
    files = []
    for name in sorted(values):
        value = "" if values[name] is None else str(values[name])
        if delivery == "credentials":
            files.append((f"credentials/{name}", value.encode("utf-8"), 0, 0o600))
            continue
        if not encrypt:
            files.append((f"credentials/{name}.cred", None, 0, 0o600))
            continue
        # systemd-creds encrypts with the host's key (and TPM2 where there is one): useless on another host.
        rc, out, dummy = module.run_command(
            [module.get_bin_path("systemd-creds", required=True), "encrypt", f"--name={name}", "-", "-"],
            data=value, binary_data=True, encoding=None)
        if rc != 0:
            raise ConfigError(f"systemd-creds encrypt of the credential {name} failed (rc {rc}); the value is not shown")
        files.append((f"credentials/{name}.cred", out, 0, 0o600))
    return files


def main():
    module = AnsibleModule(
        argument_spec={
            "app": {"type": "str", "required": True},
            "root": {"type": "path"},
            "state": {"type": "str", "default": "query",
                      "choices": ["query", "present", "current", "rolled_back", "annotate"]},
            "name": {"type": "str"},
            "build_id": {"type": "str"},
            "to": {"type": "str", "default": ""},
            "resolve": {"type": "bool", "default": False},
            "delivery": {"type": "str", "default": "env_file",
                         "choices": ["env_file", "credentials", "encrypted_credentials"]},
            "secrets": {"type": "dict", "no_log": True},
            "group": {"type": "str"},
            "generation": {"type": "int"},
            "units": {"type": "dict", "default": {}},
            "config": {"type": "dict", "default": {}},
            "meta": {"type": "dict", "default": {}},
            "adopt": {"type": "dict", "default": {}},
            "marker": {"type": "str", "default": ""},
            "keep": {"type": "int", "default": 0},
            "key": {"type": "str", "default": "migrations", "choices": ["migrations"]},
            "entry": {"type": "dict", "default": {}},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
        },
        required_if=[("state", "present", ["name", "build_id"]), ("state", "current", ["name"]),
                     ("state", "annotate", ["name"])],
        supports_check_mode=True,
    )
    p = module.params
    check = module.check_mode
    layout = ConfigLayout(p["app"])
    code = Layout(p["root"] or f"/srv/{p['app']}")
    out: dict = {"changed": False}

    def run(argv):
        tool = module.get_bin_path(argv[0], required=True)
        return module.run_command([tool, *argv[1:]], environ_update=ENV)

    def write_units(units: dict[str, str]) -> list[str]:
        # Checked when the release was installed (an adopted one is what ran).
        return write(p["unit_dir"], units, run, check, validate=False, changed=differing(p["unit_dir"], units))

    try:
        before = (layout.link(layout.current), layout.link(layout.previous))
        if p["state"] == "query":
            if p["secrets"] is not None:
                number, new = choose_generation(layout, secrets_digest(p["delivery"], p["secrets"]))
                out["generation"] = {"number": number, "new": new}
            live = before[0]
            if live:
                rec = record(layout, live)
                out["live"] = summary(rec) | {"declared": rec.get("declared"), "singleton_host": rec.get("singleton_host")}
            if p["resolve"]:
                # A host deployed before release configs has none; its rollback goes by the build links alone.
                if records(layout) or p["to"]:
                    rec = resolve(layout, p["to"])
                    out["target"] = summary(rec) | {"declared": rec.get("declared")}
                else:
                    out["target"] = None
        elif p["state"] == "present":
            meta = {"installed_by": p["meta"]}
            # The new release's generation first: the number the units were rendered with is taken before the copy
            # of a live state from before release configs takes the next one.
            if p["generation"]:
                values = p["secrets"] or {}
                # A complete generation of encrypted credentials is not encrypted again, only its modes checked.
                complete = os.path.isfile(f"{layout.generation(p['generation'])}/{DIGEST_FILE}")
                files = secret_files(module, p["app"], p["delivery"], values, p["group"],
                                     encrypt=not complete) if not check or complete else []
                out["changed"] = write_generation(layout, p["generation"], files,
                                                  secrets_digest(p["delivery"], values), check)
            if p["adopt"] and os.path.islink(code.current):
                live_build = os.path.basename(os.readlink(code.current))
                out["adopted"] = adopt(layout, live_build, app_unit_files(p["unit_dir"], p["app"], p["marker"]),
                                       p["adopt"], meta, check, reserved={p["generation"]} if check else set())
            if p["units"] and not check:
                # A unit systemd would refuse stops the deploy here, before any host is switched.
                verify(p["units"], run)
            # The generation the units name is the release's, whatever the caller recorded.
            secrets = {**(p["config"].get("secrets") or {}), "delivery": p["delivery"],
                       "generation": p["generation"] or None}
            config = {**p["config"], "secrets": secrets}
            out["name"], out["created"] = stage(layout, p["name"], p["build_id"], p["units"], config, meta, check)
            out["changed"] = out["changed"] or out["created"] or bool(out.get("adopted"))
            live, previous = layout.link(layout.current), layout.link(layout.previous)
            users = in_use(code)[0]
            protected = {n for n in (live, previous, out["name"], out.get("adopted")) if n}
            protected |= {r["name"] for r in records(layout) if r.get("build_id") in users}
            builds = {r["build_id"] for r in installed(code)} | ({p["build_id"]} if check else set())
            named = generations_named(list(app_unit_files(p["unit_dir"], p["app"], "").values()), layout.base)
            out["removed"] = prune(layout, p["keep"], protected, builds, named, check)
            out["changed"] = out["changed"] or bool(out["removed"])
        elif p["state"] == "current" and check and not os.path.isdir(layout.release(p["name"])):
            # A check run installed nothing: what switching to the release it would have installed writes.
            out.update(changed=True, name=p["name"], written=sorted(differing(p["unit_dir"], p["units"])),
                       build_id=p["build_id"], target=None, **{"from": before[0], "from_build": None})
        elif p["state"] in ("current", "rolled_back"):
            if p["state"] == "current":
                target = p["name"]
                previous = before[0] if before[0] != target else before[1]
            else:
                # The deploy's own rollback names the release live before it; the rollback playbook what it was given.
                rec = resolve(layout, p["name"] or p["to"], exact=bool(p["name"]))
                target, previous = rec["name"], None
                out["migrations"] = migrations_since(layout, rec)
            done = activate(layout, target, code, previous, write_units, check)
            out.update(changed=done["changed"], name=target, written=done["written"], build_id=done["build_id"],
                       target=summary(done["record"]) | {"declared": done["record"].get("declared"),
                                                         "singleton_host": done["record"].get("singleton_host")},
                       **{"from": done["from"], "from_build": done["from_build"]})
            if done["written"] and not check:
                rc, dummy, err = run(["systemctl", "daemon-reload"])
                if rc != 0:
                    module.fail_json(msg=f"systemctl daemon-reload failed (rc {rc}): {err.strip()}; the unit files of "
                                         f"release {target} are written", **out)
            # A process started before this instant was started from the units live before; one started after runs
            # these (a rollback to the release live before a switch restarts only what started after the switch).
            out["at"], out["at_monotonic"] = time.time(), time.monotonic()
            # When the release gone to was last live before (the record as read before this activation is noted).
            out["live_since"] = went_live_at(done["record"])
            if done["from"] != target and not check:
                annotate(layout, target, "activated", {**p["meta"], "at": now()}, check)
                if p["state"] == "rolled_back" and done["from"]:
                    # Left by a rollback: kept only while it is the previous release or among the newest.
                    annotate(layout, done["from"], "abandoned", {**p["meta"], "at": now(), "to": target}, check)
        else:
            out["changed"] = annotate(layout, p["name"], p["key"], p["entry"], check)
        out.update(releases=[summary(r) for r in records(layout)], current=layout.link(layout.current),
                   previous=layout.link(layout.previous))
        if module._diff and out["changed"]:
            out["diff"] = {"before": f"current -> {before[0]}\nprevious -> {before[1]}\n",
                           "after": f"current -> {out['current']}\nprevious -> {out['previous']}\n"}
    except (ConfigError, SecretSpecError, UnitFileError, OSError) as exc:
        # The reason alone: what was read before it (every kept release's declaration) would bury it.
        module.fail_json(msg=str(exc), changed=bool(out.get("changed")))
    module.exit_json(**out)


if __name__ == "__main__":
    main()
