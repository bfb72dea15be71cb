# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: queue_readers
short_description: The hosts that read the app's queues for a report, each queue read from one host
version_added: 0.4.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - The queues are in the broker, so reading them from every host of a deploy reads each one once per host (a
    Python process importing the app on each). This picks, in play order, the hosts that have a Celery or RQ queue
    no earlier host picked has; every queue of any host is then read by exactly one of them.
extends_documentation_fragment:
  - sturdy.workers.host_plans
"""

EXAMPLES = r"""
- name: Read the queues once per queue, not once per host
  sturdy.workers.app_status:
    plan: "{{ shop_plan }}"
  when: inventory_hostname in ansible_play_hosts | sturdy.workers.queue_readers(hostvars, 'shop_plan')
"""

RETURN = r"""
_value:
  description: The hosts that read, in play order; empty when no host has a Celery or RQ queue.
  type: list
  elements: str
"""


def queue_readers(hosts, hostvars, plan):
    readers, read = [], set()
    for name in hosts:
        processes = (hostvars[name].get(plan) or {}).get("processes") or []
        queues = {(p.get("adapter"), p.get("celery_app") or "", q) for p in processes
                  if p.get("adapter") in ("celery", "rq") for q in p.get("queues") or []}
        if queues - read:
            readers.append(name)
            read |= queues
    return readers


class FilterModule:
    def filters(self):
        return {"queue_readers": queue_readers}
