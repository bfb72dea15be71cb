# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: running_builds
short_description: Which build each running instance runs, across hosts
version_added: 0.3.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - The build of a running unit is the release its main process runs from (its working directory under the app's
    C(releases/)). More than one build across the hosts and instances is what a deploy killed midway leaves behind.
options:
  _input:
    description: Host name to its M(sturdy.workers.unit_health) C(units) (each with C(Cwd)).
    type: dict
    required: true
  releases:
    description: The app's releases directory (P(sturdy.workers.app_plan#filter) C(releases)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Name the builds the instances run
  ansible.builtin.debug:
    msg: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, ['before', 'units'])))
             | sturdy.workers.running_builds('/srv/shop/releases') }}"
  run_once: true
"""

RETURN = r"""
_value:
  description: Build to the C(host unit) names running it, sorted.
  type: dict
"""


def running_builds(units_by_host, releases):
    prefix = str(releases).rstrip("/") + "/"
    found: dict = {}
    for host, units in sorted((units_by_host or {}).items()):
        for unit, props in sorted((units or {}).items()):
            cwd = (props or {}).get("Cwd") or ""
            if cwd.startswith(prefix):
                found.setdefault(cwd[len(prefix):].split("/", 1)[0], []).append(f"{host} {unit}")
    return found


class FilterModule:
    def filters(self):
        return {"running_builds": running_builds}
