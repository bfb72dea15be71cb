# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The app plan: an application's declaration in, every fact derived from it out.

One place for the rules that name things (units, target, paths, accounts) and that resolve commands
against a release, so no role, module or filter writes them again. Pure functions, no Ansible imports:
the app_plan filter exposes plan() to the roles, the modules import the helpers they need.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from typing import Any

from ansible_collections.sturdy.workers.plugins.module_utils.names import (
    HISTORY,
    MAINTENANCE_LOCK,
    PAUSED,
    TASK_RECORDS,
    socket_unit,
)
from ansible_collections.sturdy.workers.plugins.module_utils.secret_delivery import SecretSpecError, layout

APP_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
BUILD_ID = re.compile(r"^[A-Za-z0-9._+-]{1,128}$")
PROCESS_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
# Where systemd reads administrator units (systemd.unit(5)).
UNIT_DIR = "/etc/systemd/system"
# Adapters whose instances answer smoke jobs (module_utils/adapters.py).
SMOKE_ADAPTERS = ("celery", "rq", "command")
# Relative paths inside a release: no ./, ../ or empty segments (a command must stay inside the release).
_MEMBER = re.compile(r"^(?!\.{1,2}(/|$))(?!.*/\.{1,2}(/|$))(?!.*//)[^/\0][^\0]*$")


class AppPlanError(ValueError):
    """A declaration the collection cannot plan; the message names the variable and the fix."""


def check_app(app: Any) -> str:
    if not isinstance(app, str) or not APP_NAME.match(app):
        raise AppPlanError(f"sturdy_app={json.dumps(app)} cannot name units, users and paths: use lower-case letters, digits "
                           "and '-', starting with a letter, at most 32 characters (for example sturdy_app: shop)")
    return app


def check_build_id(build_id: Any, variable: str = "sturdy_build_id") -> str:
    if not isinstance(build_id, str) or not BUILD_ID.match(build_id):
        raise AppPlanError(f"{variable}={json.dumps(build_id)} cannot go into a unit file or name a release: use letters, "
                           "digits and . _ + - only, 1 to 128 characters (for example 2026.11.29-1a2b3c)")
    return build_id


def paths(app: str, root: str = "") -> dict[str, str]:
    """Where an app's releases, links and deploy lock live (root defaults to /srv/<app>)."""
    root = root or f"/srv/{check_app(app)}"
    if not root.startswith("/"):
        raise AppPlanError(f"sturdy_release_root={root!r} is not an absolute path; use one such as /srv/{app}")
    return root_paths(root)


def root_paths(root: str) -> dict[str, str]:
    root = posixpath.normpath(root)
    return {
        "root": root,
        "releases": f"{root}/releases",
        "current": f"{root}/current",
        "previous": f"{root}/previous",
        "lock": f"{root}/.deploy.lock",
        # Held by an operator (sturdy.workers.lock): every deploy, rollback and restart is refused until it is gone.
        "maintenance": f"{root}/{MAINTENANCE_LOCK}",
        # Build, result and time of the last deploy (written by the deploy, read by the metrics collector).
        "last_deploy": f"{root}/.last-deploy.json",
        # What the last successful deploy wrote (module_utils/deploy_state.py), root only.
        "deployed": f"{root}/.deployed.json",
        # While it exists, the workers it names take no message (sturdy.workers.pause; module_utils/pause.py).
        "paused": f"{root}/{PAUSED}",
        # Every run on this host, appended at its end (module_utils/history.py).
        "history": f"{root}/{HISTORY}",
    }


def release_dir(root: str, build_id: str) -> str:
    return f"{root}/releases/{build_id}"


def target_unit(app: str) -> str:
    return f"{app}.target"


def template_unit(app: str, process: str) -> str:
    return f"{app}-{process}@.service"


def instance_unit(app: str, process: str, n: int) -> str:
    return f"{app}-{process}@{n}.service"


def instance_pattern(app: str, process: str | None = None) -> str:
    """A regular expression for the instance units of one process type, or of every process type of the app."""
    name = re.escape(process) if process else "[a-z][a-z0-9_-]*"
    return f"^{re.escape(app)}-{name}@[^.]+[.]service$"


def marker(app: str) -> str:
    """A line in every unit the collection writes: units without it are not this app's and are never replaced."""
    return f"# sturdy.workers: app={app}"


def member(path: str, current: str) -> str | None:
    """The path inside a release that `path` names: relative paths are, and so are absolute ones under current/.
    None for a path outside the release (a system binary)."""
    if path.startswith(current + "/"):
        path = path[len(current) + 1:]
    elif path.startswith("/"):
        return None
    if not _MEMBER.match(path):
        raise AppPlanError(f"{path!r} is not a path inside the release: give it relative to the release "
                           "(bin/shop-worker, venv/bin/celery) without ./ or ../, or absolute")
    return path


def resolve(path: str, release: str, current: str) -> str:
    """`path` (relative to a release, under current/, or absolute elsewhere) as an absolute path in `release`."""
    if path.rstrip("/") == current:
        return release
    inside = member(path, current)
    return path if inside is None else f"{release}/{inside}"


def _argv_member(argv: Any, what: str, example: str, current: str) -> str:
    """The path inside the release that argv[0] names ("" when it lies outside), after checking argv's shape."""
    if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(a, str) for a in argv) or not argv[0]:
        raise AppPlanError(f"{what} must be a non-empty list of strings (argv) whose first element is a path inside "
                           f"the release or absolute, for example {example}")
    try:
        return member(argv[0], current)
    except AppPlanError as exc:
        raise AppPlanError(f"{what}[0]: {exc}") from None


def _one_off(argv: Any, what: str, example: str, where: dict, release: str) -> dict | None:
    """A command run once in the release (a migration): the path inside it argv[0] names ("" when absolute outside
    it) and the argv with that path resolved against `release`; None without a command."""
    if not argv:
        return None
    inside = _argv_member(argv, what, example, where["current"])
    return {"member": inside, "command": [f"{release}/{inside}" if inside and release else argv[0], *argv[1:]]}


_SHARE = re.compile(r"^(\d+)%$")


def rollout_size(where: str, value: Any, instances: int, round_up: bool) -> int | None:
    """How many instances a max_surge (`round_up`) or max_unavailable declaration means for `instances`: a count, or
    a percentage of them ("25%": rounded up for a surge, down for the unavailable, as Kubernetes does); at most
    `instances`. None when not declared."""
    if value is None:
        return None
    found = _SHARE.match(str(value).strip())
    if found:
        share = int(found[1]) * instances
        return min(instances, -(-share // 100) if round_up else share // 100)
    if isinstance(value, bool) or not str(value).strip().isdigit():
        raise AppPlanError(f"{where}={json.dumps(value)}: give a number of instances (0, 1, 2 ...) or a percentage of "
                           "them such as '25%'")
    return min(instances, int(value))


def rollout(app: str, name: str, declared: dict[str, Any], instances: int) -> dict[str, Any]:
    """The surge units started beside a process type's instances during a restart, and how many of its instances
    may restart at once beyond them (1 without a surge, 0 with one: never fewer than declared consume)."""
    where = f"sturdy_processes[{name}]"
    surge = rollout_size(f"{where}.max_surge", declared.get("max_surge"), instances, True) or 0
    most = rollout_size(f"{where}.max_unavailable", declared.get("max_unavailable"), instances, False)
    most = (0 if surge else 1) if most is None else most
    if instances and not surge and not most:
        raise AppPlanError(f"{where}: max_surge and max_unavailable are both 0 for {instances} instance(s), so no "
                           "instance could ever be restarted. Give max_surge (start new ones first) or max_unavailable "
                           "(restart that many at once) a value above 0")
    return {"surge_units": [instance_unit(app, name, n) for n in range(instances + 1, instances + surge + 1)],
            "max_unavailable": most}


def _process(app: str, root: dict[str, str], declared: dict[str, Any], user: str, group: str,
             release: str = "") -> dict[str, Any]:
    """One process type planned. With `release` (a build's directory), its command and working directory given
    inside the release (relative, or under current/) name that directory: a unit then runs the build it was written
    for, whatever `current` names, and switching is writing the units."""
    name = declared.get("name")
    if not isinstance(name, str) or not PROCESS_NAME.match(name):
        raise AppPlanError(f"sturdy_processes[].name={json.dumps(name)}: a process type name is lower-case letters, "
                           "digits, '_' and '-', starting with a letter, at most 40 characters (for example name: worker)")
    where = f"sturdy_processes[{name}]"
    command = declared.get("command")
    inside = _argv_member(command, f"{where}.command", "[bin/shop-worker, --concurrency, '4']", root["current"])
    runs_from = release or root["current"]
    workdir = declared.get("working_directory")
    if workdir is not None:
        try:
            workdir = resolve(str(workdir), runs_from, root["current"])
        except AppPlanError as exc:
            raise AppPlanError(f"{where}.working_directory: {exc}") from None
    elif not command[0].startswith("/"):
        # A command given relative to the release runs from it, as the smoke test expects.
        workdir = runs_from
    instances = declared.get("instances")
    instances = 1 if instances is None else int(instances)
    adapter = declared.get("adapter") or "none"
    return {
        **{k: v for k, v in declared.items() if v is not None},
        "name": name,
        "adapter": adapter,
        "smoke": adapter in SMOKE_ADAPTERS,
        "instances": instances,
        "user": declared.get("user") or user,
        "group": declared.get("group") or group,
        "command": [resolve(command[0], runs_from, root["current"]), *command[1:]],
        "member": inside,
        "working_directory": workdir,
        "queues": list(declared.get("queues") or []),
        "environment": dict(declared.get("environment") or {}),
        "description": declared.get("description") or f"{app} {name}",
        "template": template_unit(app, name),
        "units": [instance_unit(app, name, n) for n in range(1, instances + 1)],
        "unit_pattern": instance_pattern(app, name),
        **rollout(app, name, declared, instances),
    }


def smoke_processes(procs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The process types a smoke job can prove (an adapter), each with `real_queues`: its declared queues that no
    earlier one declares, so each real queue is smoke-tested once, through the adapter of a process type that
    consumes it (a Celery message in a plain worker's Redis list would be taken and never answered)."""
    found, seen = [], set()
    for proc in procs:
        if proc["smoke"]:
            found.append({**proc, "real_queues": [q for q in proc["queues"] if q not in seen]})
            seen.update(proc["queues"])
    return found


def plan(
    app: str,
    build_id: str = "",
    root: str = "",
    processes: list[dict[str, Any]] | None = None,
    secrets: list[str] | dict | None = None,
    delivery: str = "env_file",
    user: str = "",
    group: str = "",
    migrate_command: list[str] | None = None,
    artifact: str = "",
    base_dir: str = "",
    secrets_generation: int | None = None,
    run_command: list[str] | None = None,
) -> dict[str, Any]:
    """Everything derived from an app's declaration.

    `build_id` may be empty (a role used without a release); `artifact` relative to `base_dir` (the playbook's
    directory) is made absolute; `migrate_command` is resolved against the build's release, and so are the process
    types' commands; `secrets_generation` names the generation of secret values the units load (none: the live
    paths, links to the live release's generation).
    """
    check_app(app)
    if build_id:
        check_build_id(build_id)
    where = paths(app, root)
    user = user or app
    group = group or app
    try:
        secret_layout = layout(app, delivery or "env_file", sorted(str(n) for n in (secrets or [])),
                               int(secrets_generation) if secrets_generation else None)
    except SecretSpecError as exc:
        raise AppPlanError(str(exc)) from None
    release = release_dir(where["root"], build_id) if build_id else ""
    procs = [_process(app, where, dict(p), user, group, release) for p in (processes or [])]
    names = [p["name"] for p in procs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise AppPlanError(f"sturdy_processes[].name={json.dumps(twice[0])} is declared more than once: declare each "
                           "process type once")
    # Every path inside the release something runs, and what declares it (as a message would name it).
    # As declared: the message names what the user wrote.
    declared = {str(p.get("name")): (p.get("command") or [""])[0] for p in (processes or [])}
    executables = {p["member"]: f"sturdy_processes[{p['name']}].command[0]={declared[p['name']]}" for p in procs
                   if p["member"]}
    migrate = _one_off(migrate_command, "sturdy_migrate_command", "[bin/shop-migrate]", where, release)
    if migrate and migrate["member"]:
        executables.setdefault(migrate["member"], f"sturdy_migrate_command[0]={migrate_command[0]}")
    if artifact and not os.path.isabs(artifact):
        artifact = os.path.normpath(os.path.join(base_dir or os.getcwd(), artifact))
    metrics_unit = f"sturdy-metrics-{app}"
    metrics_config = f"/etc/sturdy-workers/{app}.metrics.json"
    return {
        "app": app,
        "build_id": build_id,
        **where,
        "release": release,
        "artifact": artifact,
        "target": target_unit(app),
        # StateDirectory=<app> of every unit; the agent records running tasks under it (names.TASK_RECORDS).
        "state_dir": f"/var/lib/{app}",
        "task_records": f"/var/lib/{app}/{TASK_RECORDS}",
        # The metrics collector's service and timer (sturdy.workers.observe, entry point metrics).
        "metrics_unit": metrics_unit,
        "metrics_config": metrics_config,
        "marker": marker(app),
        "unit_dir": UNIT_DIR,
        "unit_files": [template_unit(app, "*"), socket_unit(template_unit(app, "*")),
                       target_unit(app)],
        "instance_pattern": instance_pattern(app),
        "user": user,
        "group": group,
        "users": sorted({p["user"] for p in procs}),
        "groups": sorted({p["group"] for p in procs}),
        "secrets": secret_layout,
        # Every file a deploy writes on the host (glob patterns; directories walked): a redeploy of the same build
        # that finds them as the last successful deploy left them has nothing to write (module deploy_state).
        "state_files": [f"{UNIT_DIR}/{target_unit(app)}", f"{UNIT_DIR}/{app}-*", f"{UNIT_DIR}/{metrics_unit}.*",
                        secret_layout["directory"], f"{metrics_config}*"],
        "processes": procs,
        "smoke_processes": smoke_processes(procs),
        "executables": executables,
        "migrate": migrate,
        # A one-off command run in the release (sturdy.workers.run).
        "run": _one_off(run_command, "sturdy_run_command", "[bin/shop-report, --since, 1d]", where, release),
    }
