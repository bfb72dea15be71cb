#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: consumption
short_description: Pause or resume an app's workers taking messages, and wait until every instance says it did
version_added: 0.6.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - O(state=paused) writes the app's pause marker O(path) (C(/srv/<app>/.paused)) naming who, when, why and the
    process types paused (O(processes), all when empty; added to those paused already). The worker agent of every
    Celery and RQ instance of those types reads it within a second (and at every start, so a restarted or newly
    deployed instance stays paused) and stops taking messages from its queues - Celery cancels its task consumers, RQ
    pops only from the instance's smoke queue - while its running tasks finish and its smoke queue stays consumed.
  - O(state=consuming) removes the marker (or, with O(processes), those types from it) and the agents take messages
    again.
  - Then it waits up to O(timeout) seconds until every active unit of O(units) says so in its systemd C(StatusText)
    (C(paused by ...) or not), and fails naming those that do not. O(state=query) only reads the marker.
  - Supports check mode (nothing is written or waited for).
options:
  path:
    description: The pause marker (P(sturdy.workers.app_plan#filter) C(paused)).
    type: path
    required: true
  state:
    description: Pause (C(paused)), resume (C(consuming)) or read (C(query)).
    type: str
    choices: [paused, consuming, query]
    default: query
  processes:
    description: The process types to pause or resume; empty means all.
    type: list
    elements: str
    default: []
  declared:
    description: Every pausable process type of the app (those left paused when some are resumed out of all).
    type: list
    elements: str
    default: []
  owner:
    description: Who pauses (user@controller), recorded in the marker.
    type: str
    default: ""
  reason:
    description: Why, recorded in the marker (as C(message)).
    type: str
    default: ""
  units:
    description: The instances whose StatusText must confirm the new state (those not active are only reported).
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds to wait for every unit of O(units) to confirm.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    description: Reports what would change; writes and waits for nothing.
"""

EXAMPLES = r"""
- name: Pause the workers of shop
  sturdy.workers.consumption:
    path: /srv/shop/.paused
    state: paused
    owner: alice@ci-7
    reason: broker maintenance
    units: [shop-worker@1.service, shop-worker@2.service]
"""

RETURN = r"""
holder:
  description: The marker after the call (C(owner), C(message), C(processes), C(started)); empty when nothing is paused.
  returned: always
  type: dict
current:
  description: The build the app's C(current) link names beside O(path) (empty when none), the build a resume's smoke
    jobs expect.
  returned: always
  type: str
units:
  description: Per unit of O(units), its C(active) state and its agent's C(status) line, as last read.
  returned: unless O(state=query) or in check mode
  type: dict
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sturdy.workers.plugins.module_utils.pause import confirmed, pause, read, resume
from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import parse_show, systemctl_runner


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["paused", "consuming", "query"], "default": "query"},
            "processes": {"type": "list", "elements": "str", "default": []},
            "declared": {"type": "list", "elements": "str", "default": []},
            "owner": {"type": "str", "default": ""},
            "reason": {"type": "str", "default": ""},
            "units": {"type": "list", "elements": "str", "default": []},
            "timeout": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    p = module.params
    live = os.path.join(os.path.dirname(p["path"]), "current")
    current = os.path.basename(os.path.realpath(live)) if os.path.islink(live) else ""
    if p["state"] == "query":
        module.exit_json(changed=False, holder=read(p["path"]) or {}, current=current)
    if p["state"] == "paused":
        changed, holder = pause(p["path"], p["owner"], p["reason"], p["processes"], check=module.check_mode)
    else:
        changed, holder = resume(p["path"], p["processes"], p["declared"], check=module.check_mode)
    if module.check_mode or not p["units"]:
        module.exit_json(changed=changed, holder=holder or {}, units={}, current=current)
    run = systemctl_runner(module)
    deadline = time.monotonic() + p["timeout"]
    while True:
        rc, out, err = run(["systemctl", "show", "--property=Id,ActiveState,StatusText", "--", *p["units"]])
        if rc != 0:
            module.fail_json(msg=f"systemctl show failed: {err.strip()}", changed=changed, holder=holder or {})
        units, waiting = confirmed(parse_show(out), p["state"] == "paused")
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    if waiting:
        word = "paused" if p["state"] == "paused" else "consuming again"
        module.fail_json(
            msg=(f"{', '.join(waiting)} did not say within {p['timeout']}s that it is {word} (its status: "
                 f"{units[waiting[0]]['status'] or 'none'}). The marker is written and stays in effect. An RQ worker "
                 "(and a Celery worker on the solo pool) reads it between jobs: one running a long job does so when "
                 "the job ends - run this again with a sturdy_pause_timeout longer than that job to wait for it. A "
                 "worker agent from a collection older than the pause never will: deploy the app again."),
            changed=changed, holder=holder or {}, units=units, current=current)
    module.exit_json(changed=changed, holder=holder or {}, units=units, current=current)


if __name__ == "__main__":
    main()
