# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: deploy_controller
short_description: This controller's deploy process, as the deploy lock records it
version_added: 0.3.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - The host name, boot ID, and PID and start time of the running C(ansible-playbook) process. The deploy lock
    records it, so a later deploy from the same controller knows at once whether the deploy holding a lock is alive
    (P(sturdy.workers.deploy_lock_verdicts#filter)).
options: {}
"""

EXAMPLES = r"""
- name: Name the run
  ansible.builtin.set_fact:
    deploy_controller: "{{ lookup('sturdy.workers.deploy_controller') }}"
  run_once: true
"""

RETURN = r"""
_raw:
  description: One dictionary with C(host), C(boot_id), C(pid) and C(pid_start).
  type: list
  elements: dict
"""

import socket

from ansible.plugins.lookup import LookupBase

from ansible_collections.sturdy.workers.plugins.module_utils.deploy_lock import controller_identity


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        return [controller_identity(socket.gethostname())]
