# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: app_plan
short_description: Everything derived from an application's declaration, computed in one place
version_added: 0.1.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Turns the declaration (app, build, release root, process types, secrets and their delivery) into the facts every
    role of the collection needs, so none of them derives a name or a path itself.
  - "Paths: C(root) (C(/srv/<app>) unless given), C(releases), C(current), C(previous), C(lock) (the deploy lock),
    C(release) (C(releases/<build>), empty without a build) and C(artifact) (made absolute against
    O(base_dir))."
  - "Units: C(target) (C(<app>.target)), C(marker) (the line that marks the collection's units), C(unit_dir),
    C(unit_files) (name patterns of the app's unit files), C(instance_pattern) (a regular expression for every
    instance unit of the app)."
  - "Accounts: C(user) and C(group) (the defaults), C(users) and C(groups) (every account a process type runs as)."
  - "C(secrets): where the secrets live and the unit lines that load them (see P(sturdy.workers.secret_layout#filter))."
  - "C(processes): each declaration with C(template), C(units) (C(<app>-<name>@1..N.service)), C(unit_pattern),
    C(user), C(group), C(adapter), C(smoke) (whether its instances answer smoke jobs), C(command) with its
    executable resolved against the build's release (C(releases/<build>), or C(current) without a build; a command
    may be given relative to the release, C(bin/shop-worker), or under C(current/)), C(member) (that executable's
    path inside the release, or none for a path outside it) and C(working_directory) (the release by default for a
    command given relative to it). A unit so names the build it was written for, whatever C(current) names.
    C(smoke_processes) lists the smoke-testable ones."
  - "C(executables): every path inside the release that a process type or the migration runs, mapped to the
    variable that declares it; C(migrate): the migration command resolved against C(release); C(run): the one-off
    command of O(run_command), likewise."
  - "C(agent_digest): the SHA-256 of this collection's worker agent package (P(sturdy.workers.agent#lookup): every
    file of it), which the release role writes into every release's venv. The units of Celery and RQ process types carry it, so a
    collection whose agent differs rewrites them and their instances restart onto the new agent."
options:
  _input:
    description: The application name (C(sturdy_app)).
    type: str
    required: true
  build_id:
    description: The build (C(sturdy_build_id)); empty when there is none.
    type: str
    default: ""
  root:
    description: The release root (C(sturdy_release_root)); empty means C(/srv/<app>).
    type: str
    default: ""
  processes:
    description: The process types (C(sturdy_processes)).
    type: list
    elements: dict
    default: []
  secrets:
    description: The secrets (C(sturdy_secrets)); only the names are used.
    type: raw
    default: {}
  delivery:
    description: How the secrets are delivered (C(sturdy_secrets_delivery)).
    type: str
    default: env_file
  user:
    description: The default user of a process type (C(sturdy_worker_user)); empty means the app's name.
    type: str
    default: ""
  group:
    description: The default group of a process type (C(sturdy_worker_group)); empty means the app's name.
    type: str
    default: ""
  migrate_command:
    description: The migration's argv (C(sturdy_migrate_command)).
    type: list
    elements: str
    default: []
  run_command:
    description: A one-off command's argv (C(sturdy_run_command)), resolved against the release as the migration is.
    type: list
    elements: str
    default: []
  artifact:
    description: The release artifact on the controller (C(sturdy_artifact)).
    type: str
    default: ""
  base_dir:
    description: The directory a relative O(artifact) starts at (the playbook's directory).
    type: str
    default: ""
  secrets_generation:
    description:
      - The generation of secret values (C(/etc/<app>/secrets/<n>/)) the units load; C(0) means the live paths
        (C(/etc/<app>/<app>.env), C(/etc/<app>/credentials/)), which a deploy keeps as links to the live release's.
    type: int
    default: 0
    version_added: 0.5.0
"""

EXAMPLES = r"""
- name: Plan the app
  ansible.builtin.set_fact:
    shop: >-
      {{ 'shop' | sturdy.workers.app_plan(build_id='2026.11.29-2', processes=sturdy_processes,
         secrets=sturdy_secrets, delivery='credentials') }}

- name: Where its releases live, and its worker units
  ansible.builtin.debug:
    msg: "{{ shop.releases }} {{ (shop.processes | selectattr('name', '==', 'worker') | first).units }}"
"""

RETURN = r"""
_value:
  description: The plan, a dictionary; see the description for its keys.
  type: dict
"""

import os

from ansible.errors import AnsibleFilterError

# module_utils are imported inside the filter: see tests/unit/plugins/filter/test_filter_imports.py for why.


def app_plan(app, build_id="", root="", processes=None, secrets=None, delivery="env_file", user="", group="",
             migrate_command=None, artifact="", base_dir="", secrets_generation=0, run_command=None):
    from ansible_collections.sturdy.workers.plugins.module_utils.app_plan import AppPlanError, plan

    try:
        result = plan(app, build_id=build_id or "", root=root or "", processes=processes or [],
                      secrets=list((secrets or {}).keys()) if isinstance(secrets, dict) else secrets,
                      delivery=delivery, user=user or "", group=group or "", migrate_command=migrate_command or [],
                      artifact=artifact or "", base_dir=base_dir or "",
                      secrets_generation=int(secrets_generation or 0) or None, run_command=run_command or [])
    except (AppPlanError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"app_plan: {exc}") from None
    return dict(result, agent_digest=agent_digest())


_AGENT: list = []


def agent_digest() -> str:
    """The SHA-256 of the collection's worker agent package (plugins/filter/ is two levels below the collection's
    root)."""
    if not _AGENT:
        from ansible_collections.sturdy.workers.plugins.module_utils import releases

        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        _AGENT.append(releases.agent_digest(releases.agent_package(root)))
    return _AGENT[0]


class FilterModule:
    def filters(self):
        return {"app_plan": app_plan}
