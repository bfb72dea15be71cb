#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: smoke_test
short_description: Prove that every worker instance runs the expected build, and that each real queue is consumed
version_added: 0.1.0
author: sturdy.workers contributors (@sturdy-workers)
extends_documentation_fragment:
  - sturdy.workers.systemd
description:
  - Sends a smoke job to the per-instance smoke queue of each unit in O(units) (the sturdy.workers agent in the
    release makes every instance consume its own) and waits until O(timeout) for all answers. Each answer must
    name O(build_id), this host, the unit, the unit's C(MainPID) and a working directory inside O(release). The
    agent consumes the smoke queue on a channel of its own, so the job never waits behind the app's tasks; with a free
    pool slot it runs in the pool (C(ran_in=pool)); with every slot busy the worker's main process answers at once
    (C(ran_in=worker)) and names the tasks occupying the slots (C(busy)).
  - With them (one client run sends every job) one job through each queue in O(queues), the names the producers
    use; some worker must take it. It counts once every instance answered. A queue renamed on one side only fails
    here, with the queues the workers do consume. A queue that already holds
    messages gets no job (it would wait behind them, past the deadline); instead every worker consuming it must
    answer the agent's health query with O(build_id), and at least one must consume it.
  - The client runs on the host through C(systemd-run) as O(user) with O(properties) (the units'
    C(EnvironmentFile=)/C(LoadCredential=) lines), from O(release), so it reaches the broker exactly as the app
    does and no secret passes through Ansible.
  - Warns about reliability settings of the running workers that lose or duplicate tasks.
options:
  adapter:
    description: How jobs are sent. C(celery) uses the agent's client and the app's Celery app, C(rq) the agent's
      client through RQ with the Redis URL in C(RQ_REDIS_URL) (as C(rq worker) reads it), C(command) runs
      O(smoke_command) once per queue.
    type: str
    choices: [celery, rq, command]
    default: celery
  celery_app:
    description: With O(adapter=celery), the Celery app as given to C(celery -A).
    type: str
  smoke_command:
    description: With O(adapter=command), an argv (relative to O(release) or absolute) that sends a job to
      C($STURDY_SMOKE_QUEUE), waits up to C($STURDY_SMOKE_TIMEOUT) seconds and prints the answer as JSON.
    type: list
    elements: str
  release:
    description: Release directory the client runs from, and inside which the workers must run.
    type: path
    required: true
  build_id:
    description: The build every answer must report.
    type: str
    required: true
  units:
    description: Worker instance units on this host that must each answer.
    type: list
    elements: str
    default: []
  target:
    description:
      - The app's target unit. Given, only the units of O(units) it wants are sent a job (the declared instances this
        host runs, not a singleton placed on another host), read in the same round trip.
    type: str
  queues:
    description: Real queues that must each be consumed by some worker.
    type: list
    elements: str
    default: []
  user:
    description: User the client runs as.
    type: str
    required: true
  group:
    description: Group the client runs as.
    type: str
    required: true
  properties:
    description: Unit lines for the client's transient unit, such as C(EnvironmentFile=/etc/shop/shop.env).
    type: list
    elements: str
    default: []
  environment:
    description: Non-secret environment of the client (the process's C(environment)).
    type: dict
    default: {}
  timeout:
    description: Seconds to wait for all answers.
    type: float
    default: 30
  stop_timeout:
    description: The workers' stop timeout in seconds, to warn when C(task_time_limit) is not below it.
    type: int
attributes:
  check_mode:
    support: full
    description: Sends nothing in check mode.
  diff_mode:
    support: none
    description: Changes nothing.
requirements:
  - systemd
  - the sturdy.workers agent in the release (installed by the release role)
"""

EXAMPLES = r"""
- name: Every worker instance answers with the new build
  sturdy.workers.smoke_test:
    celery_app: shop.celery
    release: /srv/shop/releases/2026.11.29-2
    build_id: "2026.11.29-2"
    units: [shop-worker@1.service, shop-worker@2.service]
    queues: [default]
    user: shop
    group: shop
    properties: [EnvironmentFile=/etc/shop/shop.env]
"""

RETURN = r"""
instances:
  description: One entry per unit, with C(queue), C(ok), C(latency) (seconds), C(answer) (with C(ran_in) and
    C(busy)) or C(error), C(problems).
  returned: always
  type: list
  elements: dict
queues:
  description: One entry per real queue, with C(queue), C(ok), C(latency), C(answer) or C(error); for a queue that
    held messages, C(backlog) (their count) and C(consumers) (node, build_id, host, unit) instead of C(answer).
  returned: always
  type: list
  elements: dict
reliability_warnings:
  description: Settings of the running workers that lose or duplicate tasks (also shown as warnings).
  returned: always
  type: list
  elements: str
"""

import os
import socket
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sturdy.workers.plugins.module_utils.adapters import (
    AdapterError,
    adapter_for,
    broker_unreachable,
    check_answer,
    reliability_warnings,
    smoke_queue,
    run_bounded,
    transient_argv,
)
from ansible_collections.sturdy.workers.plugins.module_utils.secret_mask import host_masker
from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import SystemdQueryError, members


def main():
    module = AnsibleModule(
        argument_spec={
            "adapter": {"type": "str", "choices": ["celery", "rq", "command"], "default": "celery"},
            "celery_app": {"type": "str"},
            "smoke_command": {"type": "list", "elements": "str"},
            "release": {"type": "path", "required": True},
            "build_id": {"type": "str", "required": True},
            "units": {"type": "list", "elements": "str", "default": []},
            "target": {"type": "str"},
            "queues": {"type": "list", "elements": "str", "default": []},
            "user": {"type": "str", "required": True},
            "group": {"type": "str", "required": True},
            "properties": {"type": "list", "elements": "str", "default": []},
            "environment": {"type": "dict", "default": {}},
            "timeout": {"type": "float", "default": 30},
            "stop_timeout": {"type": "int"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, instances=[], queues=[], msg="check mode: no smoke job sent")
    # The client's output and the answers are the app's own: mask the secret values the units load before they go out.
    mask = host_masker(p["properties"], module.run_command)
    fail_json, exit_json = module.fail_json, module.exit_json
    module.fail_json = lambda **result: fail_json(**mask(result))
    module.exit_json = lambda **result: exit_json(**mask(result))
    release = os.path.realpath(p["release"])
    host = socket.gethostname()
    try:
        adapter = adapter_for(p)
    except AdapterError as exc:
        module.fail_json(msg=str(exc))

    def send(queues: list[str]) -> list[dict]:
        outputs, seconds = [], []
        for argv in adapter.commands(release, queues, p["timeout"]):
            # The client waits up to the timeout for the broker to take the jobs, then as long for the answers.
            limit = 2 * p["timeout"] + 30
            cmd = transient_argv(p["user"], p["group"], release, p["properties"], p["environment"], argv)
            began = time.monotonic()
            rc, out, err = run_bounded(module.run_command, cmd, limit)
            seconds.append(round(time.monotonic() - began, 3))
            if rc != 0:
                tail = "\n".join((out + err).strip().splitlines()[-15:])
                module.fail_json(msg=f"The smoke client failed on {host} (rc {rc}), run from {release} as {p['user']} "
                                     f"with the units' secrets. Its output:\n{tail}")
            outputs.append(out)
        try:
            return adapter.parse(outputs, queues, seconds)
        except AdapterError as exc:
            module.fail_json(msg=f"smoke test on {host}: {exc}")
        return []

    if p["target"]:
        try:
            wanted = members(module.run_command, p["target"])
        except SystemdQueryError as exc:
            module.fail_json(msg=f"{exc} on {host}")
        p["units"] = [unit for unit in p["units"] if unit in wanted]
    failures, warnings = [], []
    # One client run sends every job, the instances' and the real queues' (each run starts the app's Python).
    own = [smoke_queue(unit, host) for unit in p["units"]]
    pids = []
    if p["units"]:
        rc, out, err = module.run_command(["systemctl", "show", "--property=MainPID", "--value", "--", *p["units"]])
        pids = out.split() if rc == 0 else []
    answered = send(own + p["queues"]) if own or p["queues"] else []
    instances = answered[:len(own)]
    if len(instances) != len(own):
        module.fail_json(msg=f"The smoke client answered for {len(instances)} of {len(own)} queues on {host}")
    if p["units"]:
        rc, out, err = module.run_command(["systemctl", "show", "--property=MainPID", "--value", "--", *p["units"]])
        pids_after = out.split() if rc == 0 else []
        for unit, pid, pid_after, entry in zip(p["units"], pids + [None] * len(p["units"]),
                                               pids_after + [None] * len(p["units"]), instances):
            entry["unit"] = unit
            if not entry.get("ok") and entry.get("unreachable"):
                failures.append(broker_unreachable(f"the smoke job for {unit} on {host}", host, entry))
                continue
            if not entry.get("ok") and "TimeoutError" in entry.get("error", "TimeoutError"):
                failures.append(f"{unit} on {host} did not answer the smoke job within {p['timeout']:g}s: it does not "
                                f"consume its smoke queue {entry['queue']}. Is it running the release's code with the "
                                f"agent (Type=notify, STURDY_AGENT={p['adapter']} in the unit)? Its journal tells more")
                continue
            if not entry.get("ok"):
                failures.append(f"the smoke job for {unit} on {host} failed: {entry.get('error')}")
                continue
            answer = entry["answer"]
            expect = {"build_id": p["build_id"], "host": host, "unit": unit, "pid": pid, "release": release}
            entry["problems"] = check_answer(answer, expect)
            if pid_after not in (None, pid) and str(answer.get("pid")) == pid_after:
                # Its new process answered: the instance restarted while the job was in flight.
                entry["problems"] = [f"it restarted while its smoke job was in flight (main PID {pid} -> {pid_after}), "
                                     f"so it is not running steadily; journalctl -u {unit} says why"
                                     ] + [x for x in entry["problems"] if not x.startswith("pid is ")]
            if entry["problems"]:
                failures.append(f"{unit} on {host} answered, but {'; '.join(entry['problems'])}")
            warnings += reliability_warnings(unit, answer.get("settings") or {}, p["stop_timeout"])
    consumed = sorted({q for e in instances if e.get("ok") for q in e["answer"].get("queues", [])})
    # A real queue counts only once every instance answered (its job went out with theirs).
    results = answered[len(own):] if not failures else []
    for entry in results:
        if "backlog" in entry:
            # The queue held messages: no job was sent behind them; the workers consuming it now are the proof.
            others = [c for c in entry["consumers"] if c.get("build_id") != p["build_id"]]
            if not entry["consumers"]:
                failures.append(
                    f"Queue {entry['queue']!r} holds {entry['backlog']} waiting message(s) and no worker consumes it, "
                    "so they wait forever"
                    + (f". The workers on {host} consume {', '.join(consumed)}" if consumed else "")
                    + ". Make the worker's queues (its -Q option) and the producers' queue names agree, and list them "
                      "in sturdy_processes[].queues")
            elif others:
                names = ", ".join(f"{c.get('unit')} on {c.get('host')} ({c.get('build_id')})" for c in others)
                failures.append(f"queue {entry['queue']!r} ({entry['backlog']} waiting) is consumed by workers running "
                                f"another build: {names}, expected {p['build_id']}")
        elif entry.get("unreachable"):
            failures.append(broker_unreachable(f"the smoke job for queue {entry['queue']!r}", host, entry))
        elif not entry.get("ok"):
            failures.append(
                f"No worker took the smoke job sent to queue {entry['queue']!r} within {p['timeout']:g}s: nothing "
                f"consumes that queue, so the producers' jobs there wait forever"
                + (f". The workers on {host} consume {', '.join(consumed)}" if consumed else "")
                + ". Make the worker's queues (its -Q option) and the producers' queue names agree, and list them in "
                  "sturdy_processes[].queues")
        elif entry["answer"].get("build_id") != p["build_id"]:
            failures.append(f"queue {entry['queue']!r} was consumed by a worker running build "
                            f"{entry['answer'].get('build_id')} ({entry['answer'].get('unit')} on "
                            f"{entry['answer'].get('host')}), expected {p['build_id']}")
    for warning in dict.fromkeys(warnings):
        module.warn(warning)
    result = {"changed": False, "instances": instances, "queues": results, "reliability_warnings": list(dict.fromkeys(warnings))}
    if failures:
        module.fail_json(msg="Smoke test failed: " + " | ".join(failures), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
