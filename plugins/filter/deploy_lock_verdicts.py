# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: deploy_lock_verdicts
short_description: Whether each deploy holding a deploy lock is alive, judged on the controller
version_added: 0.3.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - A lock taken from this controller is alive exactly as long as the C(ansible-playbook) process that took it (same
    boot, same process start time). A lock taken from another controller is alive while its lease is fresh (the
    deploy renews it on the hosts it works on, each phase and during every rolling restart; the freshest renewal
    across the hosts counts).
options:
  _input:
    description: The content of each host's lock (M(sturdy.workers.deploy_lock) C(holder) with
      O(sturdy.workers.deploy_lock#module:state=query)); an empty value for a host without a lock.
    type: list
    elements: dict
    required: true
  me:
    description: This controller (P(sturdy.workers.deploy_controller#lookup)).
    type: dict
    required: true
  lease:
    description: Seconds without a sign of life after which a deploy from another controller is dead.
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Judge the deploys holding a lock
  ansible.builtin.set_fact:
    lock_verdicts: >-
      {{ ansible_play_hosts | map('extract', hostvars, ['seen', 'holder'])
         | sturdy.workers.deploy_lock_verdicts(lookup('sturdy.workers.deploy_controller'), 180) }}
  run_once: true
"""

RETURN = r"""
_value:
  description: Run ID to C(alive) (bool), C(why) (what told), C(locks) (how many hosts it holds) and
    C(renewed_epoch).
  type: dict
"""

import time


def deploy_lock_verdicts(holders, me, lease):
    # Imported here: ansible loads every filter file to find one filter (tests/unit/plugins/filter/test_filter_imports).
    from ansible_collections.sturdy.workers.plugins.module_utils.deploy_lock import verdicts

    return verdicts(list(holders or []), me or {}, int(lease), time.time())


class FilterModule:
    def filters(self):
        return {"deploy_lock_verdicts": deploy_lock_verdicts}
