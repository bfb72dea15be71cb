#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: rolling_restart
short_description: Restart systemd units in a rolling way, each batch ready and stable before the next
version_added: 0.1.0
author: sturdy.workers contributors (@sturdy-workers)
extends_documentation_fragment:
  - sturdy.workers.systemd
description:
  - For each unit in order, resets its start-limit counter (a deliberate restart counts toward C(StartLimitBurst=)
    like a crash), restarts it and waits for the restart job. With C(Type=notify) that is the process's C(READY=1)
    (the worker agent sends it once the worker consumes), with C(Type=exec) the C(execve).
  - Then waits for the unit's HTTP readiness URL when it has one, and watches the unit for O(settle) seconds. It
    must stay active with the same C(InvocationID), C(MainPID) and no automatic restart, or it is in a crash loop.
  - With O(groups), per process type, in order, its surge units are started first, on the new code, and proven
    ready and stable before any running instance is stopped; then its units restart in batches of (surge units +
    C(max_unavailable)) side by side, each batch ready and stable before the next. Once the type's last batch is
    stable its surge units are told to stop without waiting (a warm shutdown, they finish their running tasks).
  - Stops at the first unit that fails and reports it with its last journal lines; the units after it are not
    touched, so the others keep running the build they ran, and surge units are told to stop.
options:
  lease:
    description:
      - The deploy lock this run holds here (C(path), C(run_id)); its lease is renewed every 15 seconds while the
        restarts run, so a long restart (tasks finishing under a warm shutdown) is a sign of life. Empty renews
        nothing.
    type: dict
    default: {}
  units:
    description:
      - Units to restart one at a time, in order. Each is a name, or a dictionary with C(name) and C(http) (a
        readiness URL that must answer 2xx).
      - One of O(units), O(groups) and O(settling) is required.
    type: list
    elements: raw
  groups:
    description:
      - Process types to restart in turn, each a dictionary with C(units) (as in O(units)), C(surge) (units to start
        beside them first, as in O(units)) and C(max_unavailable) (how many of its units may be restarting at once
        beyond the surge; default 1). C(sturdy.workers.worker_plan) gives one per process type as C(rollout).
    type: list
    elements: dict
  only:
    description:
      - Restart only these units of O(groups); a process type none of whose units is listed is skipped, surge
        included. Unset restarts every unit of O(groups).
    type: list
    elements: str
  settle:
    description: Seconds each restarted unit is watched for a crash loop.
    type: float
    default: 5
  overlap_settle:
    description:
      - Count a restarted batch after the first of its process type as back once it is ready, and restart the next
        while its O(settle) window runs. The first batch (or the surge units, for a type that has some) is watched
        to the end of its window before any other restarts, so a build that dies soon after it is ready is caught
        while the rest still run the old one. Each later window is checked after every later restart and watched to
        its end before surge units stop and before the task returns (with O(defer_settle), the windows still
        running are returned in RV(settling)). A unit that does not stay up still fails the task, naming it; the
        batches restarted meanwhile run the new code too.
      - A host's restart then takes the first window and a start per batch, whatever the number of batches.
      - Off, each batch is watched to the end of its window before the next restarts.
    type: bool
    default: true
    version_added: 0.4.0
  defer_settle:
    description:
      - Do not watch the last batch once it is ready (unless its process type has surge units, which stop only once
        it is stable); return it as RV(settling), for a later call with O(settling) to finish the watch once the
        caller did other work. The deploy sends its smoke jobs in between, so the last watch overlaps them and is
        not removed.
    type: bool
    default: false
  settling:
    description:
      - Finish the watch a call with O(defer_settle) left (its RV(settling)) and restart nothing. Each unit must
        still be active on the invocation and main process it came up with, with no automatic restart, until its
        watch ends; one that is not fails the task with its last journal lines.
      - One of O(units), O(groups) and O(settling) is required.
    type: dict
  ready_timeout:
    description: Seconds to wait for a readiness URL to answer 2xx.
    type: float
    default: 60
  journal_lines:
    description: Journal lines of a failed unit to show.
    type: int
    default: 25
  secret_directives:
    description:
      - The units' secret lines (C(EnvironmentFile=), C(LoadCredential=), C(LoadCredentialEncrypted=)); every value
        they load is masked in the journal lines and messages this module returns.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    description: Reports which units would be restarted and restarts nothing.
  diff_mode:
    support: none
    description: Restarts are not file changes.
requirements:
  - systemd
"""

EXAMPLES = r"""
- name: Restart the workers one at a time
  sturdy.workers.rolling_restart:
    units: [shop-worker@1.service, shop-worker@2.service]
    settle: 10

- name: Start shop-worker@3 on the new code first, then restart @1 and @2 together, never fewer than two consuming
  sturdy.workers.rolling_restart:
    groups:
      - units: [shop-worker@1.service, shop-worker@2.service]
        surge: [shop-worker@3.service]
        max_unavailable: 1

- name: Restart the web, ready when /health answers
  sturdy.workers.rolling_restart:
    units:
      - {name: shop-web@1.service, http: "http://127.0.0.1:8000/health"}
"""

RETURN = r"""
restarted:
  description: Units restarted and stable, in order, each with C(seconds) (restart until ready and settled),
    C(ready_seconds) (restart until ready), C(stop_seconds) (how long the stop took, waiting for running tasks
    under a warm shutdown), C(stop_timed_out) (the stop used the whole C(TimeoutStopSec=) and systemd SIGKILLed what
    still ran), C(before) and C(after) (C(InvocationID), C(MainPID), C(NRestarts)).
  returned: always
  type: list
  elements: dict
surge:
  description: Surge units that came up and stable, each with C(name) and C(ready_seconds); they were told to stop
    once their process type was restarted.
  returned: always
  type: list
  elements: dict
settling:
  description:
    - With O(defer_settle), the batch still to watch - C(units), each name with its state when it came up, C(until),
      the host's monotonic clock when its watch may end, and C(since), when it was restarted (seconds since the
      epoch). Empty otherwise.
  returned: success
  type: dict
failed_unit:
  description: The unit that did not come up or did not stay up.
  returned: on failure
  type: str
journal:
  description: Its last journal lines since the restart.
  returned: on failure
  type: list
  elements: str
"""

from urllib.error import URLError

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

from ansible_collections.sturdy.workers.plugins.module_utils.deploy_lock import LeaseKeeper
from ansible_collections.sturdy.workers.plugins.module_utils.rollout import (
    Host,
    RolloutError,
    as_groups,
    finish_settle,
    roll,
)
from ansible_collections.sturdy.workers.plugins.module_utils.secret_mask import host_masker
from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import ENV


def http_ok(url: str) -> bool:
    try:
        with open_url(url, timeout=2, validate_certs=False) as response:
            return 200 <= response.status < 300
    except (URLError, OSError, ValueError):
        return False


def fail(module: AnsibleModule, exc: RolloutError, changed: bool = False) -> None:
    # The journal lines are the app's own: mask the secret values the units load before they go out.
    mask = host_masker(module.params["secret_directives"], module.run_command)
    module.fail_json(msg=mask(exc.msg), failed_unit=exc.failed_unit, journal=mask(exc.journal),
                     restarted=exc.restarted, changed=changed)


def main():
    module = AnsibleModule(
        argument_spec={
            "units": {"type": "list", "elements": "raw"},
            "groups": {"type": "list", "elements": "dict"},
            "only": {"type": "list", "elements": "str"},
            "settle": {"type": "float", "default": 5},
            "defer_settle": {"type": "bool", "default": False},
            "overlap_settle": {"type": "bool", "default": True},
            "settling": {"type": "dict"},
            "ready_timeout": {"type": "float", "default": 60},
            "journal_lines": {"type": "int", "default": 25},
            # The unit lines that load the secrets (paths), not the secrets.
            "secret_directives": {"type": "list", "elements": "str", "default": [], "no_log": False},
            "lease": {"type": "dict", "default": {}},
        },
        required_one_of=[("units", "groups", "settling")],
        mutually_exclusive=[("units", "groups", "settling")],
        supports_check_mode=True,
    )
    p = module.params
    host = Host(lambda argv: module.run_command(argv, environ_update=ENV), http_ok)
    if p["settling"] is not None:
        try:
            if not module.check_mode:
                finish_settle(host, p["settling"], p["journal_lines"])
        except RolloutError as exc:
            fail(module, exc)
        except RuntimeError as exc:
            module.fail_json(msg=str(exc))
        module.exit_json(changed=False, restarted=[], surge=[], settling={})
    plan = as_groups(p["units"], p["groups"], p["only"])
    if not plan:
        module.exit_json(changed=False, restarted=[], surge=[], settling={})
    if module.check_mode:
        module.exit_json(changed=True, restarted=[{"name": u["name"]} for g in plan for u in g["units"]],
                         surge=[{"name": u["name"]} for g in plan for u in g["surge"]], settling={})
    try:
        with LeaseKeeper(p["lease"].get("path"), p["lease"].get("run_id")):
            done = roll(host, settle=p["settle"], ready_timeout=p["ready_timeout"], journal_lines=p["journal_lines"],
                        groups=plan, defer_settle=p["defer_settle"], overlap_settle=p["overlap_settle"])
    except RolloutError as exc:
        fail(module, exc, changed=True)
    except RuntimeError as exc:
        module.fail_json(msg=str(exc), changed=True)
    module.exit_json(changed=True, **done)


if __name__ == "__main__":
    main()
