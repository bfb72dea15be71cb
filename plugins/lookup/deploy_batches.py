# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: deploy_batches
short_description: The host batches of a rollout play, from C(sturdy_deploy_serial) wherever it is set
version_added: 0.4.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - The batches (P(sturdy.workers.batches#filter)) of the serial plays of the deploy, restart and rollback playbooks.
    A play's C(serial) sees extra vars and play vars but no inventory variables, so a C(sturdy_deploy_serial) set in
    C(group_vars) or C(host_vars) would be checked by the tasks and not used by the play.
  - With the play's hosts as its term (the preflight, run by tasks), it reads C(sturdy_deploy_serial) as the tasks see
    it. When that value comes from the inventory and the play's hosts hold different values, it fails, naming them,
    since one play batches every host with one value.
  - Without a term (a play's C(serial)), it takes an extra var or a play var, or else what this run's preflight read
    (the C(batches) of the C(__sturdy_deploy_run) fact it set on the play's hosts), or else the default.
  - Use it with C(query), which keeps the list.
  - "With O(problem=true), it raises nothing and returns what is wrong (one line naming C(sturdy_deploy_serial) and
    the fix), or nothing; a task can refuse the run with that line alone."
options:
  _terms:
    description: The play's hosts (C(ansible_play_hosts_all)), given by the preflight only.
    type: list
    elements: str
  problem:
    description: Return the problem with the value (as a one-element list), or an empty list, instead of the batches.
    type: bool
    default: false
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

import json
from collections.abc import Mapping

from ansible.errors import AnsibleError, AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.sturdy.workers.plugins.filter.batches import batches


def _held(hostvars, hosts):
    """The hosts' own (inventory and extra var) values, normalised: {batches as JSON: [hosts]}."""
    held: dict[str, list] = {}
    for host in hosts:
        value = hostvars[host].get("sturdy_deploy_serial")
        if value is not None and value != "":
            held.setdefault(json.dumps(batches(value)), []).append(host)
    return held


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if kwargs.pop("problem", False):
            try:
                self.run(terms, variables, **kwargs)
            except AnsibleError as exc:
                return [exc.message]
            return []
        variables = variables or {}
        hostvars = variables.get("hostvars")
        if terms:
            hosts = terms[0] if len(terms) == 1 and isinstance(terms[0], (list, tuple)) else terms
            value = batches(self._templar.template(variables.get("sturdy_deploy_serial", "")))
            held = _held(hostvars, hosts) if hostvars is not None else {}
            # A play var the inventory does not hold wins for every host; a value held by some hosts came from there.
            if len(held) > 1 and json.dumps(value) in held:
                raise AnsibleLookupError(
                    "sturdy_deploy_serial differs between the play's hosts (" + "; ".join(
                        f"{json.loads(key)} on {', '.join(names[:3])}{' and more' if len(names) > 3 else ''}"
                        for key, names in held.items())
                    + "): one play batches every host with one value. Set it once for them (their group_vars, or "
                    "-e 'sturdy_deploy_serial=[1,25%]')")
            return value
        if "sturdy_deploy_serial" in variables:
            return batches(self._templar.template(variables["sturdy_deploy_serial"]))
        # Under --syntax-check, and in a playbook's first play, Ansible has no hostvars yet.
        if hostvars is not None:
            runs = [hostvars[host].get("__sturdy_deploy_run") for host in variables.get("groups", {}).get("all", [])]
            runs = [run for run in runs if isinstance(run, Mapping) and "batches" in run]
            if runs:
                # The latest: an earlier deploy in the same ansible-playbook run may have left its own.
                return batches(max(runs, key=lambda run: float(run["started"]))["batches"])
        return batches("")
