#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: deploy_lock
short_description: One deploy of an app at a time on a host
version_added: 0.1.0
author: sturdy.workers contributors (@sturdy-workers)
extends_documentation_fragment:
  - sturdy.workers.lock_file
description:
  - O(state=present) takes the lock file O(path) for the deploy O(run_id), created exclusively (C(O_EXCL)), so of
    two deploys started together exactly one gets it. A lock already held by the same O(run_id) is kept.
  - A lock held by the same O(run_id) is renewed (its lease, a sign of life).
  - A lock held by another deploy fails with its owner, build, age and whether that deploy is alive, as O(verdicts)
    (judged on the controller by P(sturdy.workers.deploy_lock_verdicts#filter)) says, or, without a verdict, as its
    lease here says (no sign of life for O(stale_after) seconds). A dead deploy's lock is taken over only with
    O(break_stale); a live deploy's lock never.
  - While the maintenance lock beside O(path) is held (C(.maintenance.lock), P(sturdy.workers.maintenance_lock#module)),
    O(state=present) fails naming who holds it, since when and their message; a run holding the deploy lock already
    goes on.
  - O(state=absent) releases the lock if O(run_id) holds it. O(state=query) only returns the holder, and the
    maintenance lock's.
  - In check mode, reports whether the lock is free and takes nothing.
options:
  path:
    description: The lock file.
    type: path
    required: true
  state:
    description: Take or renew (C(present)), release (C(absent)) the lock, or read it (C(query)).
    type: str
    choices: [present, absent, query]
    default: present
  run_id:
    description: Identifies this deploy run; the same on every host of the run.
    type: str
    required: true
  owner:
    description: Who runs the deploy (user@controller), recorded in the lock.
    type: str
    default: ""
  build_id:
    description: The build being deployed, recorded in the lock.
    type: str
    default: ""
  stale_after:
    description: The lease, without a verdict for the holder's run; seconds without a sign of life after which the
      deploy holding a lock is dead.
    type: int
    default: 180
  break_stale:
    description: Take over the lock of a dead deploy.
    type: bool
    default: false
  controller:
    description: This deploy's controller process (P(sturdy.workers.deploy_controller#lookup)), recorded in the lock.
    type: dict
    default: {}
  kind:
    description: What the run is (C(deploy), C(rollback), C(restart)), for the message that refuses it.
    type: str
    default: deploy
  history:
    description:
      - With O(state=absent), the run's entry for the app's history on this host (C(history.jsonl) beside O(path),
        P(sturdy.workers.run_history#module)), appended before the lock is released; empty records nothing.
    type: dict
    default: {}
  verdicts:
    description: Run ID to C(alive) and C(why) (P(sturdy.workers.deploy_lock_verdicts#filter)), for the run holding
      the lock.
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    description: Reports whether the lock is free; takes and releases nothing.
"""

EXAMPLES = r"""
- name: Take the deploy lock
  sturdy.workers.deploy_lock:
    path: /srv/shop/.deploy.lock
    run_id: "{{ deploy_run_id }}"
    owner: "alice@ci-7"
    build_id: "2026.11.29-2"
"""

RETURN = r"""
holder:
  description: The lock's content before this call (run_id, owner, build_id, started, started_epoch,
    renewed_epoch, controller), if it existed.
  returned: always
  type: dict
maintenance:
  description: With O(state=query), the maintenance lock's content (owner, message, started, started_epoch), empty
    when it is not held.
  returned: when state is query
  type: dict
paused:
  description: With O(state=query), the app's pause marker (sturdy.workers.pause), empty when not paused.
  returned: when state is query
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sturdy.workers.plugins.module_utils.history import append as append_history
from ansible_collections.sturdy.workers.plugins.module_utils.names import HISTORY, PAUSED
from ansible_collections.sturdy.workers.plugins.module_utils.pause import read as read_pause

from ansible_collections.sturdy.workers.plugins.module_utils.deploy_lock import (
    LockHeld, maintenance_path, read, release, take)


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "absent", "query"], "default": "present"},
            "run_id": {"type": "str", "required": True},
            "owner": {"type": "str", "default": ""},
            "build_id": {"type": "str", "default": ""},
            "stale_after": {"type": "int", "default": 180},
            "break_stale": {"type": "bool", "default": False},
            "controller": {"type": "dict", "default": {}},
            "kind": {"type": "str", "default": "deploy"},
            "verdicts": {"type": "dict", "default": {}},
            "history": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "query":
        module.exit_json(changed=False, holder=read(p["path"]) or {},
                         maintenance=read(maintenance_path(p["path"])) or {},
                         paused=read_pause(os.path.join(os.path.dirname(p["path"]), PAUSED)) or {})
    if p["state"] == "absent":
        append_history(os.path.join(os.path.dirname(p["path"]), HISTORY), p["history"], module.check_mode)
        changed, holder = release(p["path"], p["run_id"], module.check_mode)
        module.exit_json(changed=changed, holder=holder)
    verdict = p["verdicts"].get((read(p["path"]) or {}).get("run_id") or "")
    try:
        changed, holder, warning = take(p["path"], p["run_id"], p["owner"], p["build_id"], p["stale_after"],
                                        p["break_stale"], module.check_mode, controller=p["controller"],
                                        verdict=verdict if isinstance(verdict, dict) and "alive" in verdict else None,
                                        kind=p["kind"])
    except LockHeld as exc:
        module.fail_json(msg=str(exc), holder=exc.holder)
    if warning:
        module.warn(warning)
    module.exit_json(changed=changed, holder=holder)


if __name__ == "__main__":
    main()
