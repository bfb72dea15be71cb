# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: queue_host
short_description: The first host whose app plan has a Celery process type with queues
version_added: 0.3.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - The queues are in the broker, so what reads or moves their messages (the dead letters, the task names waiting)
    runs once, from a host that has the app's Celery code and secrets. This picks it, in play order.
extends_documentation_fragment:
  - sturdy.workers.host_plans
"""

EXAMPLES = r"""
- name: Read the dead letters once
  sturdy.workers.dead_letters:
    plan: "{{ shop_plan }}"
  when: inventory_hostname == ansible_play_hosts | sturdy.workers.queue_host(hostvars, 'shop_plan')
"""

RETURN = r"""
_value:
  description: The host's name, or an empty string when no host has such a process type.
  type: str
"""


def queue_host(hosts, hostvars, plan):
    for name in hosts:
        processes = (hostvars[name].get(plan) or {}).get("processes") or []
        if any(p.get("adapter") == "celery" and p.get("queues") for p in processes):
            return name
    return ""


class FilterModule:
    def filters(self):
        return {"queue_host": queue_host}
