#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: rolling_restart
short_description: Restart systemd units one at a time, each ready and stable before the next
version_added: 0.2.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - For each unit in order, resets its start-limit counter (a deliberate restart counts toward C(StartLimitBurst=)
    like a crash), restarts it and waits for the restart job. With C(Type=notify) that is the process's C(READY=1)
    (the worker agent sends it once the worker consumes), with C(Type=exec) the C(execve).
  - Then waits for the unit's HTTP readiness URL when it has one, and watches the unit for O(settle) seconds. It
    must stay active with the same C(InvocationID), C(MainPID) and no automatic restart, or it is in a crash loop.
  - Stops at the first unit that fails and reports it with its last journal lines; the units after it are not
    touched, so the others keep running the build they ran.
options:
  units:
    description: Units to restart, in order. Each is a name, or a dictionary with C(name) and C(http) (a readiness URL
      that must answer 2xx).
    type: list
    elements: raw
    required: true
  settle:
    description: Seconds each restarted unit is watched for a crash loop.
    type: float
    default: 5
  ready_timeout:
    description: Seconds to wait for a readiness URL to answer 2xx.
    type: float
    default: 60
  journal_lines:
    description: Journal lines of a failed unit to show.
    type: int
    default: 25
attributes:
  check_mode:
    support: full
    description: Reports which units would be restarted and restarts nothing.
  diff_mode:
    support: none
    description: Restarts are not file changes.
  platform:
    support: full
    platforms: posix
    description: Needs systemd as the service manager.
requirements:
  - systemd
"""

EXAMPLES = r"""
- name: Restart the workers one at a time
  sturdy.workers.rolling_restart:
    units: [shop-worker@1.service, shop-worker@2.service]
    settle: 10

- name: Restart the web, ready when /health answers
  sturdy.workers.rolling_restart:
    units:
      - {name: shop-web@1.service, http: "http://127.0.0.1:8000/health"}
"""

RETURN = r"""
restarted:
  description: Units restarted and stable, in order, each with C(seconds) (restart until ready and settled),
    C(ready_seconds) (restart until ready), C(before) and C(after) (C(InvocationID), C(MainPID), C(NRestarts)).
  returned: always
  type: list
  elements: dict
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

import time
from urllib.error import URLError

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import (
    WATCH_PROPERTIES,
    crash_signs,
    parse_show,
)

POLL = 0.5


def main():
    module = AnsibleModule(
        argument_spec={
            "units": {"type": "list", "elements": "raw", "required": True},
            "settle": {"type": "float", "default": 5},
            "ready_timeout": {"type": "float", "default": 60},
            "journal_lines": {"type": "int", "default": 25},
        },
        supports_check_mode=True,
    )
    p = module.params
    units = [u if isinstance(u, dict) else {"name": str(u)} for u in p["units"]]
    if not units:
        module.exit_json(changed=False, restarted=[])
    if module.check_mode:
        module.exit_json(changed=True, restarted=[{"name": u["name"]} for u in units])
    env = {"LC_ALL": "C", "SYSTEMD_COLORS": "0", "SYSTEMD_PAGER": ""}

    def show(name: str) -> dict:
        rc, out, err = module.run_command(["systemctl", "show", "--property=" + ",".join(WATCH_PROPERTIES), "--", name],
                                          environ_update=env)
        if rc != 0:
            module.fail_json(msg=f"systemctl show {name} failed (rc {rc}): {err.strip()}")
        return (parse_show(out) or [{}])[0]

    restarted: list[dict] = []

    def fail(name: str, why: str, since: float) -> None:
        # The process's last words (a traceback) reach the journal through a pipe, and journald may lag behind
        # systemd's own record of the exit: wait (up to 5 s) until that record is there.
        for attempt in range(10):
            module.run_command(["journalctl", "--sync"], environ_update=env)
            # Everything since the restart, cut here: with --since, journalctl -n does not give the newest lines.
            rc, out, dummy = module.run_command(
                ["journalctl", "--no-pager", "--quiet", "-o", "short-iso", "-u", name, "--since",
                 f"@{int(since) - 1}"], environ_update=env)
            if rc != 0 or attempt == 9 or any(mark in out for mark in ("Main process exited", "Failed with result")):
                break
            time.sleep(0.5)
        journal = out.splitlines()[-p["journal_lines"]:] if rc == 0 else []
        rest = [u["name"] for u in units[len(restarted) + 1:]]
        module.fail_json(
            msg=(f"{name} did not come up on the new code: {why}. "
                 + (f"Not restarted, still on the code they ran: {', '.join(rest)}. " if rest else "")
                 + f"Last log lines ({len(journal)}):\n" + "\n".join(journal)),
            failed_unit=name, journal=journal, restarted=restarted, changed=True)

    for unit in units:
        name = unit["name"]
        before = show(name)
        since = time.time()
        started = time.monotonic()
        module.run_command(["systemctl", "reset-failed", "--", name], environ_update=env)
        rc, dummy, err = module.run_command(["systemctl", "restart", "--", name], environ_update=env)
        if rc != 0:
            fail(name, f"the restart failed ({err.strip() or 'rc ' + str(rc)})", since)
        now = show(name)
        if unit.get("http"):
            deadline = time.monotonic() + p["ready_timeout"]
            while True:
                try:
                    with open_url(unit["http"], timeout=2, validate_certs=False) as response:
                        if 200 <= response.status < 300:
                            break
                except (URLError, OSError, ValueError):
                    pass
                if time.monotonic() > deadline:
                    fail(name, f"{unit['http']} did not answer 2xx within {p['ready_timeout']:.0f}s", since)
                why = crash_signs(now, show(name))
                if why:
                    fail(name, why, since)
                time.sleep(POLL)
        ready = time.monotonic() - started
        settle_until = time.monotonic() + p["settle"]
        while True:
            why = crash_signs(now, show(name))
            if why:
                fail(name, why, since)
            if time.monotonic() >= settle_until:
                break
            time.sleep(POLL)
        restarted.append({
            "name": name,
            "seconds": round(time.monotonic() - started, 2),
            "ready_seconds": round(ready, 2),
            "before": {k: before.get(k) for k in ("InvocationID", "MainPID", "NRestarts")},
            "after": {k: now.get(k) for k in ("InvocationID", "MainPID", "NRestarts")},
        })
    module.exit_json(changed=True, restarted=restarted)


if __name__ == "__main__":
    main()
