#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: release
short_description: Install immutable releases, switch C(current) atomically, roll back and prune
version_added: 0.1.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Manages C(<root>/releases/<build_id>/) directories, each one artifact unpacked with its own virtualenv and a
    C(RELEASE.json), and the links C(<root>/current) and C(<root>/previous) beside them.
  - O(state=present) installs a release (unpack, C(python3 -m venv), C(pip install --no-index) from the artifact's
    C(wheelhouse/); no package index is ever contacted) and writes C(RELEASE.json) last. A release directory left by
    an interrupted install (it still holds C(.sturdy-partial)) is removed and installed again. The same build ID
    with another checksum is refused. With O(keep), old releases are then pruned.
  - O(state=current) points C(current) at O(build_id) (a temporary link renamed over the old one), and
    C(previous) at the release C(current) pointed at before.
  - O(state=rolled_back) points C(current) at the release C(previous) names (read from the links, never guessed
    from times) and removes C(previous); the release rolled back from is kept. A second rollback fails, with a
    message saying that the release which ran before is not recorded, so deploy the build wanted instead.
  - Pruning keeps the O(keep) newest installs (by C(RELEASE.json) install time) and never removes the release of
    C(current) or C(previous), nor one that a running process uses (its C(/proc/<pid>/cwd) or C(exe) lies inside).
options:
  root:
    description: The app's directory, C(/srv/<app>).
    type: path
    required: true
  state:
    description: What to do; see the description.
    type: str
    choices: [present, current, rolled_back]
    default: present
  build_id:
    description: The release's build ID. Required for O(state=present) and O(state=current).
    type: str
  artifact:
    description:
      - Path on the host of the release artifact (C(.tar.gz) with C(MANIFEST.json) and C(wheelhouse/)).
      - Needed only when the release is not installed yet. Mutually exclusive with O(src).
    type: path
  src:
    description:
      - Path on the controller of the release artifact. The task uploads it to Ansible's temporary directory on the
        host, installs the release from there and removes the upload, in one task (not in check mode, which installs
        nothing).
      - It is uploaded whenever it is given, so pass it only when the release is not installed yet (the release
        role does, from its preflight's look at the release slot). Mutually exclusive with O(artifact).
    type: path
    version_added: 0.4.0
  checksum:
    description: Expected SHA-256 of O(artifact), hex. Required for O(state=present).
    type: str
  commit:
    description: Source commit recorded in C(RELEASE.json); defaults to the manifest's C(commit).
    type: str
    default: ""
  python:
    description: The interpreter the release's virtualenv is made from.
    type: path
    default: /usr/bin/python3
  keep:
    description: With O(state=present), the number of newest releases to keep; C(0) prunes nothing.
    type: int
    default: 0
  agent:
    description:
      - With O(state=present), the files of the collection's worker agent package, file name to source (the role
        passes P(sturdy.workers.agent#lookup)). They are written into the venv of every kept release
        (C(site-packages/sturdy_agent/) and C(sturdy_agent.pth)) where missing or different, and a module the
        package no longer has, or the single-file C(sturdy_agent.py) of an older collection, is removed, so a
        rollback finds the same agent. It acts only in processes whose unit sets C(STURDY_AGENT).
    type: dict
  executables:
    description:
      - With O(state=present), paths inside the release (C(bin/shop-worker), C(venv/bin/celery)) that must be
        executable files once it is installed, each mapped to what declares it (C(sturdy_processes[worker].command[0])).
        One that is missing or not executable for other users fails the task, naming it, before anything switches.
    type: dict
    default: {}
  remove_artifact:
    description:
      - With O(state=present), remove O(artifact) once the release is installed (or was already), since the release
        directory holds everything in it. It stays after a failed install.
    type: bool
    default: false
    version_added: 0.4.0
  packages:
    description:
      - Debian packages the install needs (Python's venv). They are only looked up (C(dpkg-query)), in check mode too;
        RV(missing_packages) names those dpkg does not list as installed; installing them is the caller's (the
        release role's C(apt) task).
    type: list
    elements: str
    default: []
attributes:
  action:
    support: full
    description: An action plugin uploads O(src) before the module runs.
  check_mode:
    support: full
    description: Reports what would be installed, switched or removed, and changes nothing.
  diff_mode:
    support: full
    description: Shows the links and the set of releases before and after.
  platform:
    support: full
    platforms: posix
    description: Needs Python's venv and pip (Debian's C(python3-venv)) on the host.
notes:
  - Run as root; reading other users' C(/proc/<pid>/cwd) needs it.
  - A virtualenv's C(bin/python) is a link to the system interpreter, so C(/proc/<pid>/exe) of a Python process
    points outside the release; its working directory is what ties it to one. Units should set
    C(WorkingDirectory=<root>/current), which the kernel resolves to the release at start.
"""

EXAMPLES = r"""
- name: Install build 2026.11.29-1 and keep the five newest releases
  sturdy.workers.release:
    root: /srv/shop
    build_id: 2026.11.29-1
    src: dist/shop-2026.11.29-1.tar.gz
    checksum: "{{ lookup('ansible.builtin.file', 'dist/shop-2026.11.29-1.tar.gz.sha256').split()[0] }}"
    keep: 5

- name: Switch current to it
  sturdy.workers.release:
    root: /srv/shop
    state: current
    build_id: 2026.11.29-1

- name: Roll back to the previous release
  sturdy.workers.release:
    root: /srv/shop
    state: rolled_back
  register: rollback
"""

RETURN = r"""
build_id:
  description: The release installed or switched to; after a rollback, the release C(current) now names.
  returned: always
  type: str
  sample: 2026.11.29-1
path:
  description: Directory of that release.
  returned: always
  type: str
  sample: /srv/shop/releases/2026.11.29-1
current:
  description: Build ID C(current) points at afterwards (none when there is no link).
  returned: always
  type: str
previous:
  description: Build ID C(previous) points at afterwards (none when there is no link).
  returned: always
  type: str
rolled_back_from:
  description: With O(state=rolled_back), the build C(current) pointed at before; its release is kept.
  returned: when state is rolled_back
  type: str
releases:
  description: The complete releases afterwards, oldest install first, with C(build_id), C(installed_at), C(checksum).
  returned: always
  type: list
  elements: dict
removed:
  description: Releases pruned, and directories of interrupted installs removed.
  returned: always
  type: list
  elements: str
agent_updated:
  description: With O(agent), whether agent files were written into any release.
  returned: when agent is given
  type: bool
in_use:
  description: Build ID to the PIDs of processes whose working directory or executable lies inside that release.
  returned: always
  type: dict
  sample: {"2026.11.28-7": [812, 813]}
missing_packages:
  description: Those of O(packages) dpkg does not list as installed.
  returned: when O(packages) is set
  type: list
  elements: str
  sample: [python3-venv]
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sturdy.workers.plugins.module_utils.files import own_directory, replace_file
from ansible_collections.sturdy.workers.plugins.module_utils.releases import (
    AGENT_PACKAGE,
    BUILD_ID,
    Layout,
    ReleaseError,
    agent_changes,
    check_slot,
    in_use,
    install,
    installed,
    missing_executables,
    partial,
    prune_plan,
    release_state,
    replace_link,
    site_packages,
)


def describe(current: str | None, previous: str | None, releases: list[str]) -> str:
    return "".join([f"current -> {current}\n", f"previous -> {previous}\n"] + [f"release {r}\n" for r in releases])


def run(module: AnsibleModule, layout: Layout) -> dict:
    p = module.params
    state, build_id, check = p["state"], p["build_id"], module.check_mode
    current, previous = layout.link_target(layout.current), layout.link_target(layout.previous)
    releases = [r["build_id"] for r in installed(layout)]
    result: dict = {"changed": False, "removed": [], "diff": {"before": describe(current, previous, releases)}}

    if state in ("present", "current"):
        if not build_id or not BUILD_ID.match(build_id):
            raise ReleaseError(f"build_id={build_id!r}: use letters, digits and . _ + - (for example 2026.11.29-1)")

    if p["src"]:
        raise ReleaseError("src is uploaded by the release action plugin: call the module as sturdy.workers.release "
                           "from a task, or copy the artifact to the host and pass artifact")
    if state == "present":
        if not p["checksum"]:
            raise ReleaseError("checksum is required with state=present (the artifact's SHA-256)")
        for name in partial(layout):
            # An install that was interrupted; whatever it left is not trusted.
            result["removed"].append(name)
            if not check:
                shutil.rmtree(layout.release(name))
        slot = check_slot(layout, build_id, p["checksum"].lower())
        for directory in (layout.root, layout.releases):
            # Root-owned: the app's accounts cannot change its code. Missing parents are made root's 0755 too.
            result["changed"] = own_directory(directory, 0o755, check, parents=True) or result["changed"]
        if slot != "installed":
            result["changed"] = True
            if not check:
                if not p["artifact"] or not os.path.isfile(p["artifact"]):
                    raise ReleaseError(f"artifact {p['artifact']} not found on the host: pass src (the artifact on the "
                                       "controller, uploaded by this task) or copy it there first")
                install(layout, build_id, p["artifact"], p["checksum"].lower(), p["commit"], p["python"],
                        lambda argv, env: module.run_command(argv, environ_update=env))
        if p["remove_artifact"] and p["artifact"] and os.path.lexists(p["artifact"]) and not check:
            os.unlink(p["artifact"])
        if p["executables"] and release_state(layout, build_id) == "installed":
            problems = missing_executables(layout.release(build_id), p["executables"])
            if problems:
                raise ReleaseError(f"Build {build_id} is installed, but " + "; ".join(problems)
                                   + ". Nothing running was changed. Fix the build (or the declaration) and deploy "
                                   "again; the release stays for inspection")
        plan = installed(layout)
        if build_id not in [r["build_id"] for r in plan]:
            plan.append({"build_id": build_id})  # check mode: where the install would go, newest
        if p["keep"] > 0:
            users, unreadable = in_use(layout)
            candidates = prune_plan(plan, p["keep"], {current, previous, build_id, *users})
            if candidates and unreadable:
                # Not knowing whether a process runs from a release is not a reason to delete it.
                module.warn(f"Pruned nothing: could not read /proc/<pid>/cwd and exe of {len(unreadable)} processes "
                            f"(PIDs {', '.join(map(str, unreadable[:10]))}), so releases {', '.join(candidates)} may be "
                            "in use. Run as root with CAP_SYS_PTRACE (become: true on a normal host).")
                candidates = []
            for name in candidates:
                result["removed"].append(name)
                if not check:
                    shutil.rmtree(layout.release(name))
        if p["agent"]:
            # The collection's worker agent (readiness, smoke queue) in the venv of every kept release: the units
            # expect it whichever release they run, including one a rollback goes back to that was installed
            # before the agent existed or by an older collection.
            changes, touched = {}, []
            for release in [layout.release(r["build_id"]) for r in installed(layout)
                            if r["build_id"] not in result["removed"]]:
                found = agent_changes(release, p["agent"])
                changes.update(found)
                touched += [release] if found else []
            result["agent_updated"] = bool(changes)
            result["changed"] = result["changed"] or bool(changes)
            for path, content in changes.items():
                if check:
                    continue
                if content is None:
                    os.unlink(path)
                else:
                    if not os.path.isdir(os.path.dirname(path)):
                        os.mkdir(os.path.dirname(path))
                        os.chmod(os.path.dirname(path), 0o755)  # whatever the umask: the units' user imports it
                    replace_file(path, content.encode("utf-8"), 0o644)
            for release in [] if check else touched:
                # Compiled here, as root: the units' user cannot write into the venv, so without it every process
                # would compile the modules it imports at each start.
                argv = [f"{release}/venv/bin/python", "-m", "compileall", "-q",
                        os.path.join(site_packages(release), AGENT_PACKAGE)]
                rc, out, err = module.run_command(argv, umask=0o022)
                if rc != 0:
                    module.warn(f"{' '.join(argv)} failed (rc {rc}): {(out + err).strip()[-500:]}; the agent still "
                                "runs, compiled at each process start")
        releases = [r["build_id"] for r in plan if r["build_id"] not in result["removed"]]
        result["changed"] = result["changed"] or bool(result["removed"])

    elif state == "current":
        # In check mode the release may be one the same run would install first.
        if release_state(layout, build_id) != "installed" and not check:
            raise ReleaseError(f"build {build_id} is not installed under {layout.releases}/: install it with the "
                               "sturdy.workers.release role (state=present) before switching to it")
        if current != build_id:
            result["changed"] = True
            if not check:
                if current:
                    replace_link(layout.previous, os.path.join("releases", current))
                replace_link(layout.current, os.path.join("releases", build_id))
            previous, current = current or previous, build_id

    else:  # rolled_back
        bad, good = current, previous
        if not good or good == bad:
            raise ReleaseError(f"{layout.previous} does not name a release to go back to (current is {bad}): "
                               "deploy the build you want with sturdy_build_id=<build>")
        if release_state(layout, good) != "installed":
            raise ReleaseError(f"previous points at build {good}, which is not a complete release under "
                               f"{layout.releases}/: deploy the build you want with sturdy_build_id=<build>")
        # previous goes: which release ran before `good` is not recorded, and an install that never went live
        # must not become a rollback target. A second rollback names its build (deploy it).
        result.update(changed=True, rolled_back_from=bad)
        build_id, current, previous = good, good, None
        if not check:
            replace_link(layout.current, os.path.join("releases", good))
            os.unlink(layout.previous)
    result["diff"]["after"] = describe(current, previous, releases)
    return result | {"build_id": build_id, "path": layout.release(build_id), "current": current, "previous": previous}


def missing_packages(module: AnsibleModule, packages: list[str]) -> list[str]:
    """The packages dpkg does not list as installed (dpkg-query prints only the ones it knows; none without dpkg)."""
    dpkg_query = module.get_bin_path("dpkg-query")
    out = ""
    if dpkg_query:
        dummy, out, dummy = module.run_command(
            [dpkg_query, "--show", "--showformat=${Package} ${db:Status-Status}\n", *packages])
    present = {line.split()[0] for line in out.splitlines() if line.endswith(" installed")}
    return [name for name in packages if name not in present]


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "current", "rolled_back"], "default": "present"},
            "build_id": {"type": "str"},
            "artifact": {"type": "path"},
            # Taken by the action plugin, which passes the upload as artifact.
            "src": {"type": "path"},
            "checksum": {"type": "str", "no_log": False},
            "commit": {"type": "str", "default": ""},
            "python": {"type": "path", "default": "/usr/bin/python3"},
            "keep": {"type": "int", "default": 0},
            "agent": {"type": "dict"},
            "executables": {"type": "dict", "default": {}},
            "packages": {"type": "list", "elements": "str", "default": []},
            "remove_artifact": {"type": "bool", "default": False},
        },
        required_if=[("state", "present", ["build_id", "checksum"]), ("state", "current", ["build_id"])],
        supports_check_mode=True,
    )
    layout = Layout(module.params["root"])
    try:
        result = run(module, layout)
        result.update(releases=installed(layout), in_use=in_use(layout)[0])
        if module.params["packages"]:
            result["missing_packages"] = missing_packages(module, module.params["packages"])
    except (ReleaseError, OSError) as exc:
        module.fail_json(msg=str(exc))
    if not (module._diff and result["changed"]):
        del result["diff"]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
