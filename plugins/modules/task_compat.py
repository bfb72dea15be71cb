#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: task_compat
short_description: Refuse a build that would orphan the work waiting in the queues
version_added: 0.3.0
author: sturdy.workers contributors (@sturdy-workers)
extends_documentation_fragment:
  - sturdy.workers.systemd
  - sturdy.workers.systemd.read_only
description:
  - Before the switch, asks the NEW release which task names its Celery app registers (the agent imports the app as a
    worker would, without starting one), reads which task names the messages waiting in the process types' queues
    carry, and which names the running release registers.
  - Fails, listing each task name with its queue and count, when messages wait for a name the new build does not
    register (its workers would move them to the dead-letter queue), unless O(allow_orphaned).
  - Names the running build registers and the new one drops, with nothing waiting for them, are returned as
    C(dropped) (producers still on the old build may send them during the rollout; they end in the dead-letter queue).
  - Waiting messages are read without taking them, on Redis. RabbitMQ shows a message only by delivering it (which a
    quorum queue counts towards its delivery-limit), so there a queue is left unread, and a name the running build
    registers and the new one drops, while that queue holds messages, is refused as C(unread) with the queue's depth.
  - Runs the agent from the releases with the process type's user, environment and the app's secrets, through
    C(systemd-run). Run it on one host with the new release installed; the queues are in the broker.
options:
  plan:
    description: The app plan of the build being deployed (P(sturdy.workers.app_plan#filter) with its build); its
      C(release), C(current), C(processes) and C(secrets) are used.
    type: dict
    required: true
  allow_orphaned:
    description: Report orphaned work instead of failing.
    type: bool
    default: false
requirements:
  - systemd
"""

EXAMPLES = r"""
- name: Refuse a build that would orphan queued work
  sturdy.workers.task_compat:
    plan: "{{ sturdy_app | sturdy.workers.app_plan(build_id=sturdy_build_id, processes=sturdy_processes) }}"
  run_once: true
"""

RETURN = r"""
processes:
  description:
    - Per Celery process type with queues, C(name), C(registered) (the new build's task names), C(running) (the running
      build's, or null on a first deploy), C(waiting) (the agent's reading of each queue, C(queue), C(depth),
      C(scanned), C(tasks) (task name to count) or C(error)), C(orphaned) (task name to queue to count), C(unread)
      (as the top-level one), C(transport) (the broker's kind, C(redis) or C(amqp)) and C(dropped) (names the
      running build registers and the new one does not).
  returned: always
  type: list
  elements: dict
orphaned:
  description: Every orphaned task name to queue to count, over all process types.
  returned: always
  type: dict
unread:
  description: On a broker whose waiting messages are not read (RabbitMQ), every task name the running build registers
    and the new one drops, to each queue holding messages, to that queue's depth.
  returned: always
  type: dict
"""

import os
import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sturdy.workers.plugins.module_utils.adapters import (
    broker_unreachable,
    names_an_unreachable_broker,
    run_agent,
)
from ansible_collections.sturdy.workers.plugins.module_utils.app_status import queue_groups
from ansible_collections.sturdy.workers.plugins.module_utils.secret_mask import host_masker
from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import ENV


def orphaned(waiting: list[dict], registered: list[str], running=None) -> tuple[dict, dict]:
    """(read, unread): task name -> queue -> count of waiting messages the build does not register, as read; and for
    a queue whose messages cannot be read (RabbitMQ), each name the running build registers and the new one drops ->
    queue -> the queue's depth (those messages may be for it)."""
    found: dict = {}
    unread: dict = {}
    dropped = sorted(set(running or []) - set(registered))
    for entry in waiting:
        for name, count in (entry.get("tasks") or {}).items():
            if name not in registered:
                found.setdefault(name, {})[entry["queue"]] = count
        if entry.get("error") and entry.get("depth"):
            for name in dropped:
                unread.setdefault(name, {})[entry["queue"]] = entry["depth"]
    return found, unread


def refusal(build: str, running: str, found: dict, running_names=None, unread=None) -> str:
    """The message of a refused deploy: every orphaned name with its queues and counts, and the ways on."""
    work = "; ".join([f"{name}: " + ", ".join(f"{n} waiting in {q}" for q, n in sorted(queues.items()))
                      for name, queues in sorted(found.items())]
                     + [f"{name}: registered by the running build {running}, and " + ", ".join(
                         f"{q} holds {n} message(s) the broker does not show without delivering them, so some may be "
                         "for it" for q, n in sorted(queues.items())) for name, queues in sorted((unread or {}).items())])
    known = sorted(n for n in found if n in (running_names or []))
    if not found:
        running_names = None  # every name is one the running build registers: said above
    if running_names is None:
        old = ""
    elif known:
        old = f" The running build {running} registers {', '.join(known)}."
    else:
        old = f" The running build {running} does not register them either (a producer on another build sent them)."
    waiting = "are waiting for" if found else "may be waiting for"
    return (f"Build {build} does not register task(s) that queued messages {waiting} ({work}): its workers "
            f"would move that work to the dead-letter queue.{old} Nothing was switched. Let the running workers drain "
            "those messages first, keep the task(s) in the new build, or set sturdy_deploy_allow_orphaned_tasks=true to "
            "deploy anyway (the messages then wait in sturdy.dead.<queue>; the sturdy.workers.dead_letters playbook "
            "requeues them once a build registers the task again)")


def main():
    module = AnsibleModule(
        argument_spec={
            "plan": {"type": "dict", "required": True},
            "allow_orphaned": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    plan = module.params["plan"]
    for key in ("release", "current", "processes"):
        if not plan.get(key):
            module.fail_json(msg=f"plan has no {key!r}: pass the sturdy.workers.app_plan filter's output for a build")
    systemd_run = module.get_bin_path("systemd-run")
    if not systemd_run:
        module.fail_json(msg="systemd-run not found: this host is not managed by systemd, which sturdy.workers needs")
    directives = plan.get("secrets", {}).get("directives", [])
    mask = host_masker(directives, module.run_command)
    running = os.path.realpath(plan["current"]) if os.path.isdir(plan["current"]) else None

    def agent(proc, release, queues):
        answer, why = run_agent(lambda cmd: module.run_command([systemd_run, *cmd[1:]], environ_update=ENV), proc,
                                release, directives, ["names", "--celery-app", proc["celery_app"], *queues], dict)
        if why and names_an_unreachable_broker(why):
            module.fail_json(msg=mask(broker_unreachable(
                f"the task-name check of {proc['name']} (the agent in {release}, reading the queues)",
                socket.gethostname(), {"error": why}) + ". Nothing was switched"))
        if why:
            module.fail_json(msg=mask(f"the agent in {release} could not tell the task names of {proc['name']} "
                                      f"({why}). Next: does the app import with this build's code and the app's "
                                      "secrets? Nothing was switched"))
        return answer

    results, everything, maybe, old_names = [], {}, {}, None
    for proc in queue_groups(plan):
        found = agent(proc, plan["release"], proc["queues"])
        new, waiting = found["registered"], found["waiting"]
        old = agent(proc, running, [])["registered"] if running and running != plan["release"] else None
        lost, unread = orphaned(waiting, new, old)
        if old is not None:
            old_names = sorted(set(old_names or []) | set(old))
        for name, queues in lost.items():
            everything.setdefault(name, {}).update(queues)
        for name, queues in unread.items():
            maybe.setdefault(name, {}).update(queues)
        results.append({"name": proc["name"], "registered": new, "running": old, "waiting": waiting, "orphaned": lost,
                        "unread": unread, "transport": found.get("transport"),
                        "dropped": sorted(set(old or []) - set(new) - set(lost))})
    result = {"changed": False, "processes": results, "orphaned": everything, "unread": maybe}
    if (everything or maybe) and not module.params["allow_orphaned"]:
        module.fail_json(msg=refusal(plan.get("build_id", "?"), os.path.basename(running or ""), everything,
                                     old_names, maybe), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
