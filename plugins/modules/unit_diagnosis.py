#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: unit_diagnosis
short_description: Why an app's unit last died, in systemd's own terms, and what to do next
version_added: 0.1.0
author: sturdy.workers contributors (@sturdy-workers)
extends_documentation_fragment:
  - sturdy.workers.systemd
  - sturdy.workers.systemd.read_only
description:
  - For each unit, reads the last exit of its main process from PID 1's journal records (exit code or signal, and
    the invocation it ended), PID 1's messages about that invocation (start or stop timeout, watchdog, OOM kill,
    start limit), the unit's own log lines up to its death (the last Python traceback), the OOM kills counted in its
    cgroup's C(memory.events) and in the kernel log, and the tasks the worker agent recorded as running when it
    died, with what became of them (their state in the result backend, and whether the broker still holds them
    unacknowledged).
  - Turns them into one cause in words and the next step. A SIGKILL that systemd did not send, with a log that ends
    without an error, is named as such (the OOM killer, a container limit or a kill -9).
  - Never changes anything (it asks journald to write what it received first, C(journalctl --sync)).
options:
  plan:
    description: The app plan (P(sturdy.workers.app_plan#filter)); its C(app), C(current), C(processes),
      C(task_records) and C(secrets) are used.
    type: dict
    required: true
  units:
    description:
      - The units to diagnose. Empty diagnoses every instance of the app on this host that is not active, or that
        systemd restarted on its own (C(NRestarts) above 0).
    type: list
    elements: str
    default: []
  host:
    description: The name the report gives this host (the roles pass C(inventory_hostname)). Empty means its hostname.
    type: str
    default: ""
  since:
    description: How far back the journal is read (a C(journalctl --since) value).
    type: str
    default: "-7d"
  tasks:
    description: Ask the broker and the result backend what became of the tasks that were running (through the
      agent in the release C(current) names, with the units' user and secrets).
    type: bool
    default: true
requirements:
  - systemd
"""

EXAMPLES = r"""
- name: Why did shop-worker@1 die?
  sturdy.workers.unit_diagnosis:
    plan: "{{ sturdy_app | sturdy.workers.app_plan(processes=sturdy_processes) }}"
    units: [shop-worker@1.service]
  register: shop_diagnosis
"""

RETURN = r"""
diagnoses:
  description:
    - One per unit, with C(unit), C(state), C(result), C(restarts), C(death) (C(time), C(code), C(status), C(words),
      C(invocation), C(clean)), C(signs), C(cause), C(next), C(traceback), C(log_tail), C(empty_log), C(oom) and
      C(running_tasks) (C(id), C(name), C(started), C(ran), C(state), C(unacked), C(fate)), the tasks the dead
      invocation was running, and C(current_tasks) (C(id), C(name), C(started), C(running_for)), those the invocation
      running now runs, which nothing interrupted.
  returned: always
  type: list
  elements: dict
summary:
  description: Lines for the console.
  returned: always
  type: list
  elements: str
"""

import glob
import json
import os
import re
import socket
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sturdy.workers.plugins.module_utils.adapters import (
    AdapterError,
    json_line,
    run_bounded,
    transient_argv,
)
from ansible_collections.sturdy.workers.plugins.module_utils.app_status import (
    app_units,
    default_read,
    list_units_argv,
    parse_journal,
)
from ansible_collections.sturdy.workers.plugins.module_utils.diagnose import (
    dependency_failed_at,
    diagnosis,
    last_failure,
    summary,
)
from ansible_collections.sturdy.workers.plugins.module_utils.names import socket_unit
from ansible_collections.sturdy.workers.plugins.module_utils.secret_mask import host_masker
from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import ENV, parse_show

PROPERTIES = ("Id", "ActiveState", "SubState", "Result", "NRestarts", "ControlGroup", "TimeoutStopUSec",
              "InvocationID", "LoadState")


def main():
    module = AnsibleModule(
        argument_spec={
            "plan": {"type": "dict", "required": True},
            "host": {"type": "str", "default": ""},
            "units": {"type": "list", "elements": "str", "default": []},
            "since": {"type": "str", "default": "-7d"},
            "tasks": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    plan, p = module.params["plan"], module.params
    for key in ("app", "current", "processes", "task_records", "instance_pattern"):
        if key not in plan:
            module.fail_json(msg=f"plan has no {key!r}: pass the output of the sturdy.workers.app_plan filter")
    tools = {name: module.get_bin_path(name) for name in ("systemctl", "journalctl", "systemd-run")}
    if not all(tools.values()):
        module.fail_json(msg="systemctl, journalctl or systemd-run not found: this host is not managed by systemd")

    def run(argv, check=True):
        rc, out, err = module.run_command([tools[argv[0]], *argv[1:]], environ_update=ENV)
        if check and rc != 0:
            module.fail_json(msg=f"{' '.join(argv[:3])} ... failed (rc {rc}): {err.strip()[-500:]}")
        return out

    units = list(p["units"]) or app_units(plan, run(list_units_argv(plan["app"])))
    if not units:
        where = p["host"] or socket.gethostname()
        module.exit_json(changed=False, diagnoses=[], summary=[f"{where}: no unit of {plan['app']}"])
    shows = {b.get("Id"): b for b in parse_show(run(["systemctl", "show", "--property=" + ",".join(PROPERTIES),
                                                     "--", *units]))}
    if not p["units"]:
        units = [u for u in units if shows.get(u, {}).get("LoadState") == "loaded"
                 and (shows[u].get("ActiveState") != "active" or int(shows[u].get("NRestarts") or 0) > 0)]
    absent = [u for u in units if shows.get(u, {}).get("LoadState") == "not-found"]
    units = [u for u in units if u not in absent]
    foreign = [u for u in units if not re.match(plan["instance_pattern"], u)]
    if foreign:
        module.fail_json(msg=f"{', '.join(foreign)} is not an instance unit of {plan['app']} "
                             f"({plan['app']}-<process>@<n>.service): name one of its units")
    host = p["host"] or socket.gethostname()
    diagnoses, lines = [], []
    # What journald received but has not written yet (PID 1's timeout message, seconds after the death, on a busy host).
    run(["journalctl", "--sync"], check=False)
    for unit in units:
        props = shows.get(unit, {"Id": unit})
        since = f"--since={p['since']}"
        pid1 = parse_journal(run(["journalctl", "--no-pager", "-o", "json", since, "-n", "300", "_PID=1",
                                  f"UNIT={unit}"], check=False))
        invocation, death = last_failure(pid1, props)
        match = f"_SYSTEMD_INVOCATION_ID={invocation}" if invocation else f"_SYSTEMD_UNIT={unit}"
        output = parse_journal(run(["journalctl", "--no-pager", "-o", "json", since, "-n", "300", match],
                                   check=False))
        kernel = []
        if death:
            window = [f"--since=@{int(death['time']) - 120}", f"--until=@{int(death['time']) + 5}"]
            kernel = [str(r.get("MESSAGE", "")) for r in
                      parse_journal(run(["journalctl", "--no-pager", "-o", "json", "-k", *window], check=False))]
        cgroup = props.get("ControlGroup") or ""
        memory_events = default_read(f"/sys/fs/cgroup{cgroup}/memory.events") if cgroup else None
        tasks = []
        for path in sorted(glob.glob(os.path.join(plan["task_records"], unit, "*.json"))):
            try:
                record = json.loads(default_read(path) or "")
            except ValueError:
                continue
            # A record the agent closed (its pool process died and was replaced, or its message was dead-lettered)
            # was not running when the unit died.
            if isinstance(record, dict) and not record.get("ended") and (
                    not death or record.get("invocation") in (None, death["invocation"])):
                if death and record.get("started"):
                    record["ran"] = round(death["time"] - float(record["started"]), 1)
                elif record.get("started"):
                    record["running_for"] = round(time.time() - float(record["started"]), 1)
                tasks.append(record)
        if tasks and p["tasks"]:
            tasks = with_task_states(module, tools, plan, unit, tasks)
        required = []
        refused = dependency_failed_at(pid1)
        if refused:
            # Refused for a unit it requires: its listening socket (sturdy_processes[].listen) says why, in that
            # start attempt. (-u: systemd 257 binds in a helper, sd-listen, which logs the reason itself.)
            required = [str(r.get("MESSAGE", "")) for r in parse_journal(run(
                ["journalctl", "--no-pager", "-o", "json", f"--since=@{int(refused) - 5}", "-n", "20", "-u",
                 socket_unit(unit)], check=False))
                if int(r.get("__REALTIME_TIMESTAMP", "0")) / 1e6 <= refused + 1]
        d = diagnosis(unit, props, pid1, output, memory_events, kernel, tasks, required)
        diagnoses.append(d)
        lines += summary(host, d)
    lines += [f"{host}: no unit {u} here" for u in absent]
    if not diagnoses and not absent:
        lines.append(f"{host}: every instance of {plan['app']} is active and none was restarted by systemd")
    # Journal lines and tracebacks are the app's own output: mask the secret values it printed.
    mask = host_masker(plan.get("secrets", {}).get("directives", []), module.run_command)
    module.exit_json(changed=False, diagnoses=mask(diagnoses), summary=mask(lines))


# How long the agent may take to tell what became of the tasks: a broker that never answers does not hold the diagnosis.
TASK_STATES_SECONDS = 60


def with_task_states(module, tools, plan, unit, tasks):
    """Ask the agent, from the release current names, what became of the tasks."""
    proc = next((x for x in plan["processes"] if unit in x["units"] or re.match(x["unit_pattern"], unit)), None)
    if not proc or not (proc.get("adapter") == "rq" or (proc.get("adapter") == "celery" and proc.get("celery_app"))):
        return tasks
    release = os.path.realpath(plan["current"])
    ask = ["rq-jobs"] if proc["adapter"] == "rq" else ["tasks", "--celery-app", proc["celery_app"]]
    argv = [f"{release}/venv/bin/python", "-m", "sturdy_agent", *ask, *[str(t.get("id")) for t in tasks]]
    cmd = transient_argv(proc["user"], proc["group"], release, plan.get("secrets", {}).get("directives", []),
                         proc.get("environment", {}), argv)
    rc, out, err = run_bounded(lambda c: module.run_command([tools["systemd-run"], *c[1:]], environ_update=ENV), cmd,
                               TASK_STATES_SECONDS)
    try:
        states = {s.get("id"): s for s in json_line(out, list) if isinstance(s, dict)}
    except AdapterError:
        states = {}
    for t in tasks:
        got = states.get(str(t.get("id")))
        if got:
            t.update({k: got[k] for k in ("state", "unacked", "rq_status", "queue", "error") if k in got})
        else:
            t["error"] = f"the agent could not be asked (rc {rc}): {(out + err).strip()[-200:]}"
    return tasks


if __name__ == "__main__":
    main()
