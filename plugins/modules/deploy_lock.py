#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: deploy_lock
short_description: One deploy of an app at a time on a host
version_added: 0.2.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - O(state=present) takes the lock file O(path) for the deploy O(run_id), created exclusively (C(O_EXCL)), so of
    two deploys started together exactly one gets it. A lock already held by the same O(run_id) is kept.
  - A lock held by another deploy fails with its owner, build and age; one older than O(stale_after) is reported as
    stale with how to clear it. It is never taken over silently, unless O(break_stale) is set and it is stale.
  - O(state=absent) releases the lock if O(run_id) holds it.
  - In check mode, reports whether the lock is free and takes nothing.
options:
  path:
    description: The lock file.
    type: path
    required: true
  state:
    description: Take (C(present)) or release (C(absent)) the lock.
    type: str
    choices: [present, absent]
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
    description: Seconds after which a lock is reported as stale.
    type: int
    default: 3600
  break_stale:
    description: Take over a stale lock (its deploy is known to be dead).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Reports whether the lock is free; takes and releases nothing.
  diff_mode:
    support: none
    description: Not a content change.
  platform:
    support: full
    platforms: posix
    description: Any POSIX host; the lock is a file beside the app's releases.
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
  description: The lock's content before this call (run_id, owner, build_id, started, pid), if it existed.
  returned: always
  type: dict
"""

import datetime
import json
import os
import time

from ansible.module_utils.basic import AnsibleModule


def read(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    data.setdefault("started_epoch", os.stat(path).st_mtime)
    return data


def describe(path: str, holder: dict, stale_after: int) -> str:
    age = int(time.time() - float(holder.get("started_epoch") or 0))
    who = (f"held by {holder.get('owner') or 'an unknown owner'} (run {holder.get('run_id', '?')}) for build "
           f"{holder.get('build_id') or '?'} since {holder.get('started', '?')}, {age // 60} min {age % 60} s ago")
    if age > stale_after:
        return (f"The deploy lock {path} is STALE: {who}, longer than any deploy takes ({stale_after} s). Its deploy "
                f"probably died before it could release it. If no deploy of this app is running, remove it (rm {path}) "
                "or deploy with sturdy_deploy_break_lock=true")
    return (f"Another deploy is running: the deploy lock {path} is {who}. Wait for it to finish and deploy again; "
            f"if you are sure it is dead, remove the file")


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "run_id": {"type": "str", "required": True},
            "owner": {"type": "str", "default": ""},
            "build_id": {"type": "str", "default": ""},
            "stale_after": {"type": "int", "default": 3600},
            "break_stale": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    holder = read(path)
    mine = holder is not None and holder.get("run_id") == p["run_id"]

    if p["state"] == "absent":
        if mine and not module.check_mode:
            os.unlink(path)
        module.exit_json(changed=mine, holder=holder or {})

    if mine:
        module.exit_json(changed=False, holder=holder)
    if holder is not None:
        stale = time.time() - float(holder.get("started_epoch") or 0) > p["stale_after"]
        if not (stale and p["break_stale"]):
            module.fail_json(msg=describe(path, holder, p["stale_after"]), holder=holder)
        module.warn(f"Took over the stale deploy lock {path}: {describe(path, holder, p['stale_after'])}")
        if not module.check_mode:
            os.unlink(path)
    if module.check_mode:
        module.exit_json(changed=True, holder=holder or {})
    now = time.time()
    content = {
        "run_id": p["run_id"], "owner": p["owner"], "build_id": p["build_id"], "pid": os.getpid(),
        "started": datetime.datetime.fromtimestamp(now, datetime.timezone.utc).isoformat(timespec="seconds"),
        "started_epoch": now,
    }
    os.makedirs(os.path.dirname(path) or "/", 0o755, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        # Another deploy took it between our read and now.
        module.fail_json(msg=describe(path, read(path) or {}, p["stale_after"]), holder=read(path) or {})
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(content, fh, sort_keys=True)
        fh.write("\n")
    module.exit_json(changed=True, holder=holder or {})


if __name__ == "__main__":
    main()
