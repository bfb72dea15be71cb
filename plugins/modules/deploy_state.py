#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: deploy_state
short_description: What the last successful deploy left on a host, and whether a redeploy would change anything
version_added: 0.4.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - O(state=query) reads the app's instances (as M(sturdy.workers.unit_health) does for O(target)) and the record the
    last successful deploy left under O(root), and says whether deploying O(build_id) again would change anything
    here. Nothing differs when the record names O(build_id) and O(fingerprint), C(current) names O(build_id), its
    release is complete, every file the record lists (O(files)) has the content, owner and mode it had, no such file
    appeared, every one of O(units) is active, runs its current definition and runs from that release, and none of
    O(elsewhere) runs.
    Otherwise RV(why) names the first difference. It also returns the deploy lock's holder (RV(lock_holder)), so that
    one round trip reads everything a deploy's preflight needs from the host. It changes nothing.
  - O(state=present) records the end of a deploy - its build, O(result), time and O(run_id) in the C(.last-deploy.json)
    the metrics collector reads - and, when O(result=success), the record a later O(state=query) compares with
    (C(.deployed.json), readable by root only), with the digests of the files O(files) name now; then, in the same
    round trip, it reads the members of O(target) as they run after the deploy and releases the deploy lock O(unlock)
    holds.
  - Supports check mode (nothing is written, the lock is kept).
options:
  root:
    description: The app's root (P(sturdy.workers.app_plan#filter) C(root)).
    type: path
    required: true
  build_id:
    description: The build being deployed.
    type: str
    required: true
  state:
    description: Compare with the record (C(query)) or write it (C(present)).
    type: str
    choices: [query, present]
    default: query
  fingerprint:
    description:
      - A digest of everything the deploy was given (P(sturdy.workers.deploy_fingerprint#filter)). It goes into the
        record; no value it was computed from does.
    type: str
    default: ""
  files:
    description:
      - Glob patterns of the files the deploy writes (P(sturdy.workers.app_plan#filter) C(state_files));
        directories are walked.
    type: list
    elements: str
    default: []
  target:
    description:
      - The app's target unit, whose members are read and returned (with O(state=present), after the record is
        written).
    type: str
  unlock:
    description:
      - With O(state=present), the run ID of the deploy ending here; the deploy lock under O(root) is released if
        that run holds it (as M(sturdy.workers.deploy_lock) O(sturdy.workers.deploy_lock#module:state=absent) does),
        after the record is written. RV(unlocked) says whether it was.
    type: str
    default: ""
  history:
    description:
      - With O(state=present), the run's entry for the app's history on this host (C(history.jsonl) under O(root),
        P(sturdy.workers.run_history#module)) - C(run), C(kind), C(host), C(who), C(awx_user), C(awx_job),
        C(started), C(from), C(to), C(result), C(summary); C(finished) is the time it is appended. Appended once,
        before the lock is released. Empty records nothing.
    type: dict
    default: {}
  units:
    description: With O(state=query), the instances that must run the build (every instance planned for this host).
    type: list
    elements: str
    default: []
  elsewhere:
    description: With O(state=query), instances that must not run here (a singleton placed on another host).
    type: list
    elements: str
    default: []
  result:
    description: With O(state=present), how the deploy ended (C(success), C(failed), C(rolled_back)).
    type: str
    default: success
  run_id:
    description: With O(state=present), the deploy's run ID.
    type: str
    default: ""
  finished:
    description: With O(state=present), when the deploy ended (seconds since the epoch).
    type: float
  collect:
    description:
      - With O(state=present), a unit to start once the record is written, without waiting for it (the metrics
        collector, so the metrics show the deploy without waiting for its timer). A start systemd refuses does not
        fail the task; RV(collect_error) says why.
    type: str
    default: ""
seealso:
  - module: sturdy.workers.unit_health
  - plugin: sturdy.workers.deploy_fingerprint
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Read the instances and whether deploying the build again would change anything
  sturdy.workers.deploy_state:
    root: /srv/shop
    build_id: 2026.11.29-2
    fingerprint: "{{ dict(query('ansible.builtin.varnames', '^sturdy_')
                     | zip(query('ansible.builtin.vars', *query('ansible.builtin.varnames', '^sturdy_'))))
                     | sturdy.workers.deploy_fingerprint }}"
    files: [/etc/systemd/system/shop.target, /etc/systemd/system/shop-*, /etc/shop]
    target: shop.target
    units: [shop-worker@1.service, shop-worker@2.service]
  register: state

- name: Record a successful deploy
  sturdy.workers.deploy_state:
    root: /srv/shop
    build_id: 2026.11.29-2
    state: present
    result: success
    fingerprint: "{{ fingerprint }}"
    files: [/etc/systemd/system/shop.target, /etc/systemd/system/shop-*, /etc/shop]
    finished: "{{ now().timestamp() }}"
"""

RETURN = r"""
collect_error:
  description: With O(state=present) and O(collect), why systemd refused to start it; empty when it started.
  returned: when O(collect) is set and not in check mode
  type: str
  sample: ""
same:
  description: With O(state=query), whether nothing differs from the last successful deploy of O(build_id).
  returned: always
  type: bool
current:
  description: With O(state=query), the build the C(current) link names; none on a host that never ran the app.
  returned: with O(state=query)
  type: str
  sample: 2026.12.03-1
paused:
  description: With O(state=query), the app's pause marker (P(sturdy.workers.lock#role), entry point pause), empty when not paused.
  returned: with O(state=query)
  type: dict
why:
  description: With O(state=query), the first difference found (empty when RV(same)).
  returned: always
  type: str
  sample: /etc/systemd/system/shop-worker@.service changed since the last deploy
lock_holder:
  description: With O(state=query), the deploy lock's holder (run ID, owner, build, lease), empty when it is free.
  returned: always
  type: dict
maintenance:
  description: With O(state=query), the maintenance lock's holder (owner, message, started), empty when it is not held
    (P(sturdy.workers.maintenance_lock#module)).
  returned: always
  type: dict
unlocked:
  description: With O(state=present) and O(unlock), whether this call released the lock.
  returned: always
  type: bool
recorded_build:
  description: The build the last successful deploy recorded (empty when none).
  returned: always
  type: str
members:
  description: The services O(target) wants (empty without O(target)).
  returned: always
  type: list
  elements: str
units:
  description: The properties of the members, as M(sturdy.workers.unit_health) returns them.
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sturdy.workers.plugins.module_utils.app_plan import root_paths
from ansible_collections.sturdy.workers.plugins.module_utils.deploy_lock import read as read_lock
from ansible_collections.sturdy.workers.plugins.module_utils.deploy_lock import release
from ansible_collections.sturdy.workers.plugins.module_utils.deploy_state import (
    differs,
    file_digests,
    read_record,
    record,
    write_json,
)
from ansible_collections.sturdy.workers.plugins.module_utils.history import append as append_history
from ansible_collections.sturdy.workers.plugins.module_utils.pause import read as read_pause
from ansible_collections.sturdy.workers.plugins.module_utils.releases import Layout, ReleaseError, release_state
from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import (
    SystemdQueryError,
    add_cwd,
    query,
    systemctl_runner,
)


def members_of(module, run, units, target):
    """The members of `target` and the properties of those and of `units`, with each one's working directory."""
    try:
        read = query(run, units, target)
    except SystemdQueryError as exc:
        module.fail_json(msg=str(exc))
    add_cwd(read["units"])
    return read


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "build_id": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["query", "present"], "default": "query"},
            "fingerprint": {"type": "str", "default": "", "no_log": False},
            "files": {"type": "list", "elements": "str", "default": []},
            "target": {"type": "str"},
            "units": {"type": "list", "elements": "str", "default": []},
            "elsewhere": {"type": "list", "elements": "str", "default": []},
            "result": {"type": "str", "default": "success"},
            "run_id": {"type": "str", "default": ""},
            "finished": {"type": "float"},
            "collect": {"type": "str", "default": ""},
            "unlock": {"type": "str", "default": ""},
            "history": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    where = root_paths(p["root"])
    found = read_record(where["deployed"])
    out = {"changed": False, "same": False, "why": "", "members": [], "units": {}, "lock_holder": {}, "maintenance": {},
           "paused": {},
           "unlocked": False, "recorded_build": (found or {}).get("build_id") or ""}
    run = systemctl_runner(module)
    if p["state"] == "present":
        if not module.check_mode and os.path.isdir(where["root"]):
            done = {"build": p["build_id"], "result": p["result"], "finished": p["finished"], "run": p["run_id"]}
            out["changed"] = write_json(where["last_deploy"], done, 0o644)
            if p["result"] == "success":
                mine = record(p["build_id"], p["fingerprint"], file_digests(p["files"]))
                out["changed"] = write_json(where["deployed"], mine, 0o600) or out["changed"]
        if p["collect"] and not module.check_mode:
            # A record of the run, not a change: a collector that cannot start does not fail the deploy.
            rc, dummy, err = run(["systemctl", "start", "--no-block", "--", p["collect"]])
            out["collect_error"] = "" if rc == 0 else err.strip() or f"systemctl start rc {rc}"
        if p["target"]:
            read = members_of(module, run, [], p["target"])
            out.update(members=read["members"], units=read["units"])
        if p["history"]:
            append_history(where["history"], p["history"], module.check_mode)
        if p["unlock"]:
            out["unlocked"] = release(where["lock"], p["unlock"], module.check_mode)[0] and not module.check_mode
        module.exit_json(**out)

    out["lock_holder"] = read_lock(where["lock"]) or {}
    out["maintenance"] = read_lock(where["maintenance"]) or {}
    out["paused"] = read_pause(where["paused"]) or {}
    read = members_of(module, run, p["units"] + p["elsewhere"], p["target"])
    # The target's members, as unit_health returns them for the report; the other units asked for are only compared.
    out.update(members=read["members"], units={u: read["units"][u] for u in read["members"]})
    layout = Layout(where["root"])
    try:
        current = layout.link_target(layout.current)
        complete = release_state(layout, p["build_id"]) == "installed"
    except ReleaseError as exc:
        current, complete = None, False
        out["why"] = str(exc)
    out["current"] = current
    if not out["why"]:
        out["why"] = differs(found, p["build_id"], p["fingerprint"], file_digests(p["files"]), current, p["units"],
                             read["units"], layout.release(p["build_id"]), layout.releases, p["elsewhere"])
        if not out["why"] and not complete:
            out["why"] = f"the release of {p['build_id']} is not complete"
    out["same"] = not out["why"]
    module.exit_json(**out)


if __name__ == "__main__":
    main()
