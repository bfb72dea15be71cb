# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: singleton_host
short_description: The one host that runs an app's singleton process types
version_added: 0.4.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - A singleton process type (a scheduler such as Celery beat) runs on one host of the whole deployment. Without a
    host named, it is the first host of the B(inventory) (C(groups['all']), in inventory order) whose variables
    declare the app (C(sturdy_app)) with a singleton process type, so a C(--limit), a host batch (C(serial)) or a play
    that leaves hosts out gives every host the same answer and never starts a second one elsewhere.
  - When no inventory variables declare it (the processes are given as play or role variables), the first host of
    the play.
options:
  _input:
    description: The host named by the user (C(sturdy_worker_singleton_host)); empty to pick one.
    type: str
    required: true
  app:
    description: The app (C(sturdy_app)).
    type: str
    required: true
  inventory:
    description: Every host of the inventory, in order (C(groups['all'])).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
  play_hosts:
    description: The play's hosts (C(ansible_play_hosts_all)), for the fallback.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Run beat here only
  ansible.builtin.debug:
    msg: this host runs the app's scheduler
  when: >-
    inventory_hostname == sturdy_worker_singleton_host | sturdy.workers.singleton_host(sturdy_app, groups['all'],
    hostvars, ansible_play_hosts_all)
"""

RETURN = r"""
_value:
  description: The host's inventory name.
  type: str
"""


def singleton_host(named, app, inventory, hostvars, play_hosts):
    if named:
        return named
    for name in inventory:
        variables = hostvars[name] if name in hostvars else {}
        if variables.get("sturdy_app") != app:
            continue
        processes = variables.get("sturdy_processes") or []
        if any(isinstance(p, dict) and p.get("singleton") for p in processes):
            return name
    return play_hosts[0] if play_hosts else ""


class FilterModule:
    def filters(self):
        return {"singleton_host": singleton_host}
