# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: rabbitmq_policies
short_description: The RabbitMQ policy of each Celery queue the app plans consume (delivery limit, dead-letter queue)
version_added: 0.3.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - For every queue a Celery process type of the given app plans consumes, one policy C(sturdy-<app>-<queue>) that
    matches that queue only and sets RabbitMQ's own ceiling, C(delivery-limit) (the process type's C(max_deliveries),
    the smallest when two share a queue), and where a message over it goes, C(sturdy.dead.<queue>) through the default
    exchange.
  - The sturdy agent in each worker moves such a message first, with its reason, at the same count; the policy keeps
    the ceiling for a consumer without the agent. RabbitMQ counts deliveries in quorum queues only.
options:
  _input:
    description: The app plans (P(sturdy.workers.app_plan#filter)) of the hosts, for example each play host's.
    type: list
    elements: dict
    required: true
  max_deliveries:
    description: The ceiling of a process type that declares no C(max_deliveries).
    type: int
    default: 5
"""

EXAMPLES = r"""
- name: Set the policies with rabbitmqctl on the broker host
  ansible.builtin.command:
    argv: [rabbitmqctl, set_policy, --apply-to, queues, "{{ item.name }}", "{{ item.pattern }}",
           "{{ item.definition | to_json }}"]
  loop: "{{ ansible_play_hosts | map('extract', hostvars, 'shop_plan') | sturdy.workers.rabbitmq_policies }}"
  delegate_to: rabbit-1
  run_once: true
"""

RETURN = r"""
_value:
  description: One entry per queue, in the order the plans name them, C(name), C(queue), C(pattern) (an anchored,
    escaped regex) and C(definition).
  type: list
  elements: dict
"""

import re


def rabbitmq_policies(plans, max_deliveries=5):
    # Imported here: ansible loads every filter file to find one filter (tests/unit/plugins/filter/test_filter_imports).
    from ansible_collections.sturdy.workers.plugins.module_utils.app_status import queue_groups
    from ansible_collections.sturdy.workers.plugins.module_utils.names import DEAD_PREFIX

    found: dict[str, dict] = {}
    for plan in plans or []:
        for proc in queue_groups(plan or {}):
            ceiling = int(proc.get("max_deliveries") or max_deliveries)
            for queue in proc["queues"]:
                known = found.get(queue)
                if known and known["definition"]["delivery-limit"] <= ceiling:
                    continue
                found[queue] = {
                    "name": f"sturdy-{plan['app']}-{queue}", "queue": queue, "pattern": f"^{re.escape(queue)}$",
                    "definition": {"delivery-limit": ceiling, "dead-letter-exchange": "",
                                   "dead-letter-routing-key": DEAD_PREFIX + queue},
                }
    return list(found.values())


class FilterModule:
    def filters(self):
        return {"rabbitmq_policies": rabbitmq_policies}
