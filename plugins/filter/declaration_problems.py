# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: declaration_problems
short_description: What is wrong with an application's declaration, one line per problem, before anything runs
version_added: 0.5.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Checks the process types (C(sturdy_processes)) as given, each option's name (an unknown one with the option it
    most resembles), kind (a whole number, a list of strings, a choice) and least value (C(instances) 0 or more,
    C(max_task_runtime) 1 or more), then plans them as P(sturdy.workers.app_plan#filter) does and, given O(defaults) and
    O(systemd_version), as the worker role does (a singleton of two instances, a stop timeout shorter than the
    longest task, paths the units hide).
  - Never fails. Returns the problems, each naming the variable, the value as given and the fix, so that a task
    can refuse the run in one clear line before any host changes.
options:
  _input:
    description: The process types (C(sturdy_processes)).
    type: raw
    required: true
  app:
    description: The application name (C(sturdy_app)).
    type: str
    required: true
  build_id:
    description: The build (C(sturdy_build_id)); empty when there is none.
    type: str
    default: ""
  root:
    description: The release root (C(sturdy_release_root)).
    type: str
    default: ""
  secrets:
    description: The secrets (C(sturdy_secrets)); only the names are used.
    type: raw
    default: {}
  delivery:
    description: How the secrets are delivered (C(sturdy_secrets_delivery)).
    type: str
    default: env_file
  migrate_command:
    description: The migration command (C(sturdy_migrate_command)).
    type: raw
    default: []
  defaults:
    description: The worker role's defaults of a process type; with O(systemd_version), the units are planned too.
    type: dict
    default: {}
  systemd_version:
    description: The host's systemd version.
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Refuse a declaration no host could run, naming the variable and the fix
  ansible.builtin.fail:
    msg: "{{ __problems | join(' ') }} Nothing was changed."
  when: __problems | length > 0
  vars:
    __problems: "{{ sturdy_processes | sturdy.workers.declaration_problems(app=sturdy_app) }}"
"""

RETURN = r"""
_value:
  description: The problems, one line each; empty when the declaration can be planned.
  type: list
  elements: str
"""

# module_utils are imported inside the filter: see tests/unit/plugins/filter/test_filter_imports.py for why.


def declaration_problems(processes, app, build_id="", root="", secrets=None, delivery="env_file",
                         migrate_command=None, defaults=None, systemd_version=0):
    from ansible_collections.sturdy.workers.plugins.module_utils.app_plan import AppPlanError, plan
    from ansible_collections.sturdy.workers.plugins.module_utils.declaration import problems
    from ansible_collections.sturdy.workers.plugins.module_utils.systemd_units import UnitSpecError, plan_processes

    found = problems(processes)
    if found:
        return found
    try:
        planned = plan(str(app), build_id=build_id or "", root=root or "", processes=processes or [],
                       secrets=sorted(secrets) if isinstance(secrets, dict) else list(secrets or []),
                       delivery=delivery or "env_file", migrate_command=migrate_command or [])
        if defaults and systemd_version:
            plan_processes(planned["processes"], defaults, int(systemd_version))
    except (AppPlanError, UnitSpecError) as exc:
        return [str(exc)]
    return []


class FilterModule:
    def filters(self):
        return {"declaration_problems": declaration_problems}
