# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: worker_plan
short_description: Turn process-type declarations into the settings of their systemd units
version_added: 0.1.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Fills each declaration of O(_input) with the role defaults and derives what the unit template and the
    service tasks need, computed in one place.
  - "Derived per process: C(template) (C(<app>-<name>@.service)), C(units) (the instance units 1..N),
    C(restart_backoff) (whether the host's systemd has C(RestartSteps=)), C(restart_delays) (seconds before each
    automatic restart up to the start limit), and C(start_limit_interval): the smallest window in which
    C(start_limit_burst) fast failures actually trip the start limit."
  - A stop timeout that was not declared is raised to C(max_task_runtime) plus the margin.
options:
  _input:
    description: The process-type declarations (C(sturdy_processes)).
    type: list
    elements: dict
    required: true
  app:
    description: The application name (C(sturdy_app)).
    type: str
    required: true
  defaults:
    description: Values for options a declaration leaves out, plus C(stop_margin).
    type: dict
    required: true
  systemd_version:
    description: The host's systemd version, as returned by M(sturdy.workers.unit_health).
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Read the host's systemd version
  sturdy.workers.unit_health:
  register: host

- name: Plan the units
  ansible.builtin.set_fact:
    __plan: "{{ sturdy_processes | sturdy.workers.worker_plan(sturdy_app, defaults, host.systemd_version) }}"
"""

RETURN = r"""
_value:
  description: One dictionary per process type, the declaration merged with the defaults plus the derived keys.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.sturdy.workers.plugins.module_utils.systemd_units import UnitSpecError, plan_processes


def worker_plan(processes, app, defaults, systemd_version):
    try:
        return plan_processes(app, processes, defaults, int(systemd_version))
    except (UnitSpecError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"worker_plan: cannot plan the units of {app!r}: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"worker_plan": worker_plan}
