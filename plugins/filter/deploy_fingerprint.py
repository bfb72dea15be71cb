# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: deploy_fingerprint
short_description: One digest of everything a deploy is given
version_added: 0.4.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - A SHA-256 digest of the C(sturdy_*) variables given (secret values included) and of this collection's roles,
    plugins and playbooks. Two deploys with the same digest write the same units, secrets and files.
  - Variables that only steer a run (C(sturdy_deploy_*) other than C(sturdy_deploy_broker) and
    C(sturdy_deploy_rabbitmq), the smoke test's, status, diagnosis, dead letters and alerts, where the artifact lies
    on the controller, the facts the roles set while they run) are left out.
  - M(sturdy.workers.deploy_state) stores it on the host; no value it was computed from is stored or printed.
options:
  _input:
    description: Variable name to value; the names that do not start with C(sturdy_) are ignored.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Fingerprint this host's declaration
  ansible.builtin.set_fact:
    fingerprint: >-
      {{ dict(query('ansible.builtin.varnames', '^sturdy_')
         | zip(query('ansible.builtin.vars', *query('ansible.builtin.varnames', '^sturdy_'))))
         | sturdy.workers.deploy_fingerprint }}
"""

RETURN = r"""
_value:
  description: The digest, 64 hexadecimal characters.
  type: str
"""

import os

_CODE: list = []


def deploy_fingerprint(variables):
    from ansible_collections.sturdy.workers.plugins.module_utils.deploy_state import code_digest, fingerprint

    if not _CODE:
        # The collection's root: plugins/filter/ is two levels below it. Read once per process.
        _CODE.append(code_digest(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    return fingerprint(dict(variables or {}), _CODE[0])


class FilterModule:
    def filters(self):
        return {"deploy_fingerprint": deploy_fingerprint}
