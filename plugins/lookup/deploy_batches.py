# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: deploy_batches
short_description: The host batches of a rollout play, from C(sturdy_deploy_serial) wherever it is set
version_added: 0.4.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - What the serial plays of the deploy, restart and rollback playbooks give their C(serial), and what their preflight
    checks. It is P(sturdy.workers.batches#filter) applied to C(sturdy_deploy_serial) as an extra var or a play var
    gives it, or else as the inventory (C(group_vars), C(host_vars)) sets it. A play's C(serial) sees no inventory
    variables, so without this lookup a value in C(group_vars) would be checked by the tasks but not used by the
    play. Hosts holding different values are refused, naming them, since one play batches every host with one value.
  - Use it with C(query), which keeps the list.
notes:
  - Ansible makes C(hostvars) when it starts a playbook's first play, after it has batched that play, so the
    inventory's value is found from the second play on. The collection's serial plays all follow another play.
options: {}
"""

EXAMPLES = r"""
- name: Switch and restart, host batch by host batch
  hosts: apps
  serial: "{{ query('sturdy.workers.deploy_batches') }}"
  tasks: []
"""

RETURN = r"""
_raw:
  description: Batch sizes (positive counts or percentages C("N%")), as P(sturdy.workers.batches#filter) returns.
  type: list
  elements: raw
"""

from ansible.plugins.lookup import LookupBase

from ansible_collections.sturdy.workers.plugins.filter.batches import batches


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}
        given = self._templar.template(variables.get("sturdy_deploy_serial", ""))
        # Under --syntax-check a play has no hostvars: nothing to look up then.
        return batches(given, variables.get("hostvars"), variables.get("groups", {}).get("all", []))
