#!/usr/bin/python
# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: dead_letters
short_description: List, requeue or discard the dead letters of an app's queues
version_added: 0.3.0
author: sturdy.workers contributors (@sturdy-workers)
extends_documentation_fragment:
  - sturdy.workers.systemd
description:
  - The sturdy.workers agent moves a message its Celery workers cannot run to the dead-letter queue
    C(sturdy.dead.<queue>) beside its queue, with the reason (a message whose worker died with it more than
    C(max_deliveries) times, a task name the running build does not register, arguments the task cannot take).
  - C(list) tells, per queue, how many wait there, why (each reason and how many), which tasks, how long the oldest has
    waited, and a few of them (id, task, reason, deliveries, build, host, age). Never their arguments, which can hold
    personal data or secrets.
  - C(requeue) puts them back at the end of their queue, oldest first, once the cause is fixed (a build that registers
    the task, a fixed bug), counted afresh against C(max_deliveries). Each is published to its queue before it is
    removed from the dead-letter queue, so a failure in between leaves a copy behind, never a loss.
  - C(discard) deletes them for good and only with O(confirm_discard=true).
  - Only dead-letter queues are touched; the live queues are never purged.
  - Runs the agent (C(python -m sturdy_agent dead)) from the release C(current) names, with the process type's user,
    environment and the app's secrets (the broker's address and password), through C(systemd-run). Run it on one host
    of the app (the queues are in the broker).
options:
  plan:
    description: The app plan (P(sturdy.workers.app_plan#filter)); its C(current), C(processes) and C(secrets) are used.
    type: dict
    required: true
  action:
    description: What to do with the dead letters.
    type: str
    choices: [list, requeue, discard]
    default: list
  queues:
    description: Only these queues (as in O(plan)'s C(processes[].queues)). Empty means every queue of the app's
      C(celery) process types.
    type: list
    elements: str
    default: []
  limit:
    description: At most this many per queue (C(list) shows up to 1000 when C(0); C(requeue) and C(discard) take all
      that are there when they start).
    type: int
    default: 0
  confirm_discard:
    description: C(discard) deletes dead letters for good; without this it refuses and changes nothing.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: C(requeue) and C(discard) only list what they would move or delete.
  diff_mode:
    support: none
    description: Messages in a broker have no file to compare.
requirements:
  - systemd
"""

EXAMPLES = r"""
- name: What is in the dead-letter queues
  sturdy.workers.dead_letters:
    plan: "{{ sturdy_app | sturdy.workers.app_plan(processes=sturdy_processes, secrets=sturdy_secrets) }}"
  register: dead
  run_once: true

- name: Requeue the dead letters of the default queue after deploying the fix
  sturdy.workers.dead_letters:
    plan: "{{ sturdy_app | sturdy.workers.app_plan(processes=sturdy_processes, secrets=sturdy_secrets) }}"
    action: requeue
    queues: [default]
  run_once: true
"""

RETURN = r"""
queues:
  description:
    - Per queue, C(queue), C(dead_letter_queue) and C(count) (dead letters left); with C(list), C(reasons) (reason to
      count), C(tasks) (task name to count), C(oldest_age) (seconds) and C(sample) (up to five, with C(id), C(task),
      C(reason), C(deliveries), C(build), C(host), C(requeues), C(age)).
    - With C(requeue) or C(discard), C(moved) is how many were requeued or discarded; in check mode C(would_move)
      says how many would have been instead.
  returned: always
  type: list
  elements: dict
summary:
  description: One line per queue for the console.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sturdy.workers.plugins.module_utils.adapters import run_agent
from ansible_collections.sturdy.workers.plugins.module_utils.app_status import duration_words, queue_groups
from ansible_collections.sturdy.workers.plugins.module_utils.secret_mask import host_masker
from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import ENV


def summary_line(entry: dict, action: str) -> str:
    """What one queue's dead letters are, in a line."""
    head = f"{entry['queue']}: {entry.get('count', 0)} dead letter(s) in {entry.get('dead_letter_queue')}"
    if action != "list":
        verb = "requeued" if action == "requeue" else "discarded"
        if "would_move" in entry:
            return f"{head}; check mode: would have {verb} {entry['would_move']}"
        return f"{head} left; {verb} {entry.get('moved', 0)}"
    if not entry.get("count"):
        return head
    reasons = "; ".join(f"{n} x {r}" for r, n in sorted(entry.get("reasons", {}).items(), key=lambda kv: -kv[1]))
    return f"{head}, the oldest for {duration_words(entry.get('oldest_age'))}: {reasons}"


def main():
    module = AnsibleModule(
        argument_spec={
            "plan": {"type": "dict", "required": True},
            "action": {"type": "str", "choices": ["list", "requeue", "discard"], "default": "list"},
            "queues": {"type": "list", "elements": "str", "default": []},
            "limit": {"type": "int", "default": 0},
            "confirm_discard": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    plan = p["plan"]
    for key in ("current", "processes"):
        if key not in plan:
            module.fail_json(msg=f"plan has no {key!r}: pass the output of the sturdy.workers.app_plan filter")
    if p["action"] == "discard" and not p["confirm_discard"] and not module.check_mode:
        module.fail_json(msg="discard deletes the dead letters for good and was not confirmed: nothing was deleted. "
                             "List them first (action list); to delete them, set confirm_discard "
                             "(sturdy_dead_letters_confirm_discard=true in the dead_letters playbook)")
    if p["limit"] < 0:
        module.fail_json(msg=f"limit={p['limit']}: give 0 (all) or a positive count")
    known = {q for proc in queue_groups(plan) for q in proc["queues"]}
    unknown = [q for q in p["queues"] if q not in known]
    if unknown:
        module.fail_json(msg=f"queues {', '.join(unknown)} belong to no celery process type of the app (its queues: "
                             f"{', '.join(sorted(known)) or 'none'}); name queues from sturdy_processes[].queues")
    systemd_run = module.get_bin_path("systemd-run")
    if not systemd_run:
        module.fail_json(msg="systemd-run not found: this host is not managed by systemd, which sturdy.workers needs")
    release = plan["current"]
    action = "list" if module.check_mode else p["action"]
    command = ["dead", action] + (["--limit", str(p["limit"])] if p["limit"] else [])
    command += ["--confirm-discard"] if action == "discard" else []
    mask = host_masker(plan.get("secrets", {}).get("directives", []), module.run_command)
    found = []
    for proc in queue_groups(plan, p["queues"]):
        entries, why = run_agent(lambda cmd: module.run_command([systemd_run, *cmd[1:]], environ_update=ENV), proc,
                                 release, plan.get("secrets", {}).get("directives", []),
                                 [*command, "--celery-app", proc["celery_app"], *proc["queues"]], list,
                                 # Moving a large dead-letter queue back takes a while; a silent broker still ends.
                                 max_seconds=900)
        if why:
            module.fail_json(msg=mask(f"the agent could not {action} the dead letters of {', '.join(proc['queues'])} "
                                      f"({why}). Next: check the broker and BROKER_URL in the app's secrets; nothing "
                                      "more was done"), queues=mask(found))
        for entry in entries:
            if action == "list" and p["action"] != "list":
                entry["would_move"] = min(entry.get("count", 0), p["limit"] or entry.get("count", 0))
            elif action != "list":
                entry.setdefault("moved", 0)
        found += entries
    found = mask(found)
    module.exit_json(changed=any(e.get("moved") or e.get("would_move") for e in found), queues=found,
                     summary=[summary_line(e, p["action"]) for e in found])


if __name__ == "__main__":
    main()
