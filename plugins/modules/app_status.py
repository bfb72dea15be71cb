#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: app_status
short_description: What an app's processes are doing on one host, and what is wrong with them
version_added: 0.2.0
author: sturdy.workers contributors (@sturdy-workers)
extends_documentation_fragment:
  - sturdy.workers.systemd
  - sturdy.workers.systemd.read_only
description:
  - Reads every declared instance of every process type of the app, and any instance systemd still runs that is
    not declared; for each, its state, the build of the code it runs (from the release its working directory is in, not from
    C(current)), whether that is an older release than C(current), C(NRestarts), the automatic restarts of the last
    hour and the last exit of its main process in words (from systemd's own journal records), and its uptime.
  - Lists each problem with the next step to take.
  - Three commands (C(systemctl list-units), C(systemctl show), C(journalctl)) and reads under C(/proc); never
    changes anything.
options:
  plan:
    description:
      - The app plan (P(sturdy.workers.app_plan#filter)); its C(app), C(current), C(releases) and C(processes) are
        used.
    type: dict
    required: true
  queues:
    description:
      - Also read the queues (C(queues)) of the process types whose adapter is C(celery), that is the depth, the oldest
        waiting message (its task, and its age when the producer stamps messages, as processes with the agent do)
        and the workers that consume each (those answering Celery's remote-control ping).
      - Runs the agent (C(python -m sturdy_agent stats)) from the release C(current) names, with the process type's
        user, environment and the app's secrets, as the smoke test does; needs the plan's C(secrets).
    type: bool
    default: true
  queue_timeout:
    description: Seconds the workers have to answer the consumers' ping.
    type: float
    default: 1.0
  consumers:
    description:
      - How many Celery workers consume the queues, fleet-wide (the deploy passes the instances of its run). The read
        stops waiting for answers once that many answered, instead of waiting out O(queue_timeout); a consumer beyond
        that many may then be missing from C(consumers).
      - C(0) waits O(queue_timeout) for every worker that answers.
    type: int
    default: 0
    version_added: 0.4.0
  host:
    description: The name the report gives this host (the roles pass C(inventory_hostname)). Empty means its hostname.
    type: str
    default: ""
  journal_since:
    description: How far back the journal is read for the last exit of each instance (a C(journalctl --since) value).
    type: str
    default: "-7d"
requirements:
  - systemd
"""

EXAMPLES = r"""
- name: Read the app's processes on this host
  sturdy.workers.app_status:
    plan: "{{ sturdy_app | sturdy.workers.app_plan(processes=sturdy_processes) }}"
  register: shop_status

- name: Show what is wrong
  ansible.builtin.debug:
    var: shop_status.problems
"""

RETURN = r"""
host:
  description: The host's name as systemd knows it.
  returned: always
  type: str
current:
  description: The build C(current) points at, or null.
  returned: always
  type: str
  sample: 2026.11.29-2
processes:
  description:
    - Per process type, its C(name), C(adapter), C(queues) and C(instances).
    - Each instance has C(unit), C(state), C(sub_state), C(result), C(result_words), C(enabled), C(loaded), C(pid),
      C(build) (of the code it runs), C(build_source) (C(cwd), C(environment) or why unknown), C(old_release),
      C(unit_build) (the C(STURDY_BUILD_ID) its unit sets), C(restarts) (C(NRestarts)), C(restarts_last_hour),
      C(uptime) (seconds), C(last_exit) (C(time), C(code), C(status), C(words), C(clean)) and C(declared).
  returned: always
  type: list
  elements: dict
problems:
  description: What an operator must act on, each naming the unit and the next step.
  returned: always
  type: list
  elements: str
queues:
  description:
    - One entry per queue read, with C(queue), C(depth), C(oldest_task), C(oldest_age) (seconds, null when the oldest
      message carries no stamp), C(oldest_stamped), C(consumers) (worker node names) and C(error) when it could not
      be read.
  returned: always
  type: list
  elements: dict
systemd_version:
  description: The host's systemd version.
  returned: always
  type: int
maintenance:
  description: The maintenance lock (C(owner), C(message), C(started)) while one is held (P(sturdy.workers.lock#role)),
    else null.
  returned: always
  type: dict
last_run:
  description: The last deploy, rollback or restart recorded in the app's history on the host
    (M(sturdy.workers.run_history)), else null.
  returned: always
  type: dict
"""

import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sturdy.workers.plugins.module_utils.app_status import CollectError, collect
from ansible_collections.sturdy.workers.plugins.module_utils.secret_mask import host_masker
from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import ENV


def main():
    module = AnsibleModule(
        argument_spec={
            "plan": {"type": "dict", "required": True},
            "host": {"type": "str", "default": ""},
            "queues": {"type": "bool", "default": True},
            "queue_timeout": {"type": "float", "default": 1.0},
            "consumers": {"type": "int", "default": 0},
            "journal_since": {"type": "str", "default": "-7d"},
        },
        supports_check_mode=True,
    )
    plan = module.params["plan"]
    for key in ("app", "current", "releases", "processes"):
        if key not in plan:
            module.fail_json(msg=f"plan has no {key!r}: pass the output of the sturdy.workers.app_plan filter")

    tools = {name: module.get_bin_path(name) for name in ("systemctl", "journalctl", "systemd-run")}
    if not all(tools.values()):
        module.fail_json(msg="systemctl or journalctl not found: this host is not managed by systemd, which "
                             "sturdy.workers needs")

    def run(argv):
        return module.run_command([tools[argv[0]], *argv[1:]], environ_update=ENV)

    try:
        result = collect(plan, module.params["host"] or socket.gethostname(), run, module.params["queues"],
                         module.params["queue_timeout"], module.params["journal_since"],
                         consumers=module.params["consumers"])
    except CollectError as exc:
        module.fail_json(msg=str(exc))
    # The agent's error lines are the app's own: a broker URL in a traceback must not carry its password out.
    mask = host_masker(plan.get("secrets", {}).get("directives", []), module.run_command)
    module.exit_json(changed=False, **mask(result))


if __name__ == "__main__":
    main()
