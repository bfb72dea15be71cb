#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: maintenance_lock
short_description: Hold or release an app's maintenance lock, which refuses every deploy, rollback and restart
version_added: 0.4.0
author: sturdy.workers contributors (@sturdy-workers)
extends_documentation_fragment:
  - sturdy.workers.lock_file
description:
  - O(state=present) creates the lock file O(path) (C(/srv/<app>/.maintenance.lock)) exclusively, with O(owner),
    O(reason) and the time. Held already with the same owner and reason, it is kept as it is; held by another owner
    or for another reason, the task fails naming them (release it first to replace it).
  - While it exists, P(sturdy.workers.deploy_lock#module) refuses to take the deploy lock, so every deploy, rollback
    and restart is refused before it changes anything, with who holds it, since when and the message; a run that
    holds the deploy lock already goes on. The status playbook shows it.
  - O(state=absent) removes it, whoever holds it. O(state=query) only returns the holder.
options:
  path:
    description: The lock file.
    type: path
    required: true
  state:
    description: Hold (C(present)), release (C(absent)) or read (C(query)) the lock.
    type: str
    choices: [present, absent, query]
    default: present
  owner:
    description: Who holds it (C(user@controller), or AWX's user), recorded in the lock.
    type: str
    default: ""
  reason:
    description: With O(state=present), why and until when, in one line; shown to every run it refuses.
    type: str
    default: ""
  started:
    description: With O(state=present), when the lock is taken (UNIX time), the same on every host of a run; empty
      means now.
    type: float
attributes:
  check_mode:
    support: full
    description: Reports whether the lock would be taken or released; writes nothing.
"""

EXAMPLES = r"""
- name: No deploys tonight
  sturdy.workers.maintenance_lock:
    path: /srv/shop/.maintenance.lock
    owner: alice@ci-7
    reason: Postgres upgrade until 02:00 UTC, ask alice
"""

RETURN = r"""
holder:
  description: The lock's content before this call (owner, message, started, started_epoch), empty if it was not held.
  returned: always
  type: dict
directory:
  description: Whether the directory of O(path) (the app's root) exists on the host; the lock is written only there.
  returned: always
  type: bool
text:
  description: The holder in one line (who, since when, how long ago, the message), empty if it was not held.
  returned: always
  type: str
  sample: 'locked for maintenance by alice@ci-7 since 2026-12-06T22:40:00+00:00 (12 min 3 s ago): "Postgres upgrade"'
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sturdy.workers.plugins.module_utils.deploy_lock import (
    LockHeld, describe_maintenance, hold_maintenance, read, release_maintenance)


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "absent", "query"], "default": "present"},
            "owner": {"type": "str", "default": ""},
            "reason": {"type": "str", "default": ""},
            "started": {"type": "float"},
        },
        required_if=[("state", "present", ("reason",))],
        supports_check_mode=True,
    )
    p = module.params
    directory = os.path.isdir(os.path.dirname(p["path"]))
    if p["state"] == "query":
        changed, holder = False, read(p["path"]) or {}
    elif p["state"] == "absent":
        changed, holder = release_maintenance(p["path"], module.check_mode)
    else:
        if not p["reason"].strip() or "\n" in p["reason"]:
            module.fail_json(msg="reason must be one line saying why and until when. Nothing was changed")
        if not directory:
            module.fail_json(msg=f"{os.path.dirname(p['path'])} does not exist: the app was never deployed on this "
                                 "host. Leave it out of the play (--limit) or deploy it first. Nothing was changed")
        try:
            changed, holder = hold_maintenance(p["path"], p["owner"], p["reason"], module.check_mode, p["started"])
        except LockHeld as exc:
            module.fail_json(msg=str(exc), holder=exc.holder)
    module.exit_json(changed=changed, holder=holder, directory=directory,
                     text=describe_maintenance(holder, time.time()) if holder else "")


if __name__ == "__main__":
    main()
