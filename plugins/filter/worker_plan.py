# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: worker_plan
short_description: Turn process-type declarations into the settings of their systemd units
version_added: 0.1.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Fills each process type of an app plan (P(sturdy.workers.app_plan#filter), which names the units and resolves the
    commands) with the role defaults and derives what the unit template and the service tasks need on one host.
  - "Derived per process: C(exec_start) and C(environment_line) (quoted for systemd), C(restart_specs) (what
    M(sturdy.workers.rolling_restart) takes per instance), C(restart_backoff) (whether the host's systemd has
    C(RestartSteps=)), C(restart_delays) (seconds before each
    automatic restart up to the start limit), and C(start_limit_interval): the smallest window in which
    C(start_limit_burst) fast failures actually trip the start limit."
  - A stop timeout that was not declared is raised to C(max_task_runtime) plus the margin. A singleton process type
    gets no instance unless the defaults say C(singleton_here).
  - "Fails, naming the process type, the option and the fix, on what no host could run: an instance count outside
    0..C(max_instances), a declared stop timeout shorter than C(max_task_runtime) plus the margin, restart timing
    systemd cannot use, a path that is relative, holds characters a unit would read specially, or lies where
    C(ProtectHome=) hides it."
  - A Celery worker that C(celery) itself starts without a node name gets C(--hostname=<process>%i@%H) in its
    C(exec_start), so each instance is a node of its own.
options:
  _input:
    description: The C(processes) of the app plan.
    type: list
    elements: dict
    required: true
  defaults:
    description: >-
      Values for options a declaration leaves out, plus C(stop_margin), C(max_instances), C(singleton_here) and
      C(fleet) (every host's declarations, to split a C(rate_limit) between the instances).
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
    __plan: >-
      {{ (sturdy_app | sturdy.workers.app_plan(processes=sturdy_processes)).processes
         | sturdy.workers.worker_plan(defaults, host.systemd_version) }}
"""

RETURN = r"""
_value:
  description: One dictionary per process type, the declaration merged with the defaults plus the derived keys.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

# module_utils are imported inside the filter: see tests/unit/plugins/filter/test_filter_imports.py for why.


def worker_plan(processes, defaults, systemd_version):
    from ansible_collections.sturdy.workers.plugins.module_utils.systemd_units import UnitSpecError, plan_processes

    try:
        return plan_processes(processes, defaults, int(systemd_version))
    except (UnitSpecError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"worker_plan: cannot plan the units: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"worker_plan": worker_plan}
