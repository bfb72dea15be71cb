# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: status_report
short_description: The status of a sturdy.workers app across hosts, from each host's app_status
version_added: 0.1.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Joins what M(sturdy.workers.app_status) read on each host into one report; a table for the console, every
    problem with its next step, and build skew across hosts (hosts whose C(current) differs, and processes running
    different builds, such as producers (web) on a newer build than the workers after a C(--limit) deploy).
options:
  _input:
    description: Host name to the registered result of M(sturdy.workers.app_status) (failed or unreachable results
      are reported as problems).
    type: dict
    required: true
  app:
    description: The app's name.
    type: str
    required: true
  now:
    description: UNIX time of the report.
    type: float
    required: true
  queue_age_limit:
    description: A queue whose oldest message has waited longer than this many seconds is a problem.
    type: float
    default: 600
"""

EXAMPLES = r"""
- name: Print the status
  ansible.builtin.debug:
    msg: "{{ (dict(ansible_play_hosts_all | zip(ansible_play_hosts_all | map('extract', hostvars)
              | map(attribute='shop_status'))) | sturdy.workers.status_report('shop', now().timestamp())).summary }}"
"""

RETURN = r"""
_value:
  description:
    - The report, a dictionary with C(app), C(time), C(builds) (build to the hosts C(current) names it on),
      C(releases) (the live release, a build and its config, to the hosts it is live on),
      C(running) (build to the C(host process) pairs running it), C(queues) (queue name to its depth, oldest
      message, consumers and the host it was read from), C(hosts) (per host the app_status result or
      C(error)), C(maintenance) (each maintenance lock held, its owner, time and message in one line, to the hosts it is
      held on; not a problem), C(paused) (each pause held, what it pauses, who, when and why in one line,
      to its hosts; its queues raise no problem for having no consumer or an old message), C(last_run) (the newest
      deploy, rollback or restart recorded on the hosts, in one line as P(sturdy.workers.history_lines#filter) words
      it), C(problems) (list of strings) and C(summary) (lines for the console).
  type: dict
"""

import datetime

# module_utils are imported inside the filter: see tests/unit/plugins/filter/test_filter_imports.py for why.

COLUMNS = ("HOST", "UNIT", "STATE", "BUILD", "RESTARTS", "LAST HOUR", "UP", "LAST EXIT")


def _row(host: str, inst: dict) -> tuple:
    from ansible_collections.sturdy.workers.plugins.module_utils.app_status import duration_words

    build = inst.get("build") or "-"
    if inst.get("old_release"):
        build += " (old)"
    state = inst.get("state", "?")
    if state != "active" and inst.get("result") not in (None, "", "success"):
        state += f" ({inst['result']})"
    last = inst.get("last_exit") or {}
    return (host, inst.get("unit", "?"), state, build, str(inst.get("restarts", "-")),
            str(inst.get("restarts_last_hour", "-")), duration_words(inst.get("uptime")), last.get("words", "-"))


def _table(header: tuple, rows: list[tuple]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]


def _queue_rows(queues: dict) -> list[str]:
    from ansible_collections.sturdy.workers.plugins.module_utils.app_status import duration_words

    # The dead-letter column shows once a queue reports one (dead_letter_depth from the agent's stats).
    dead = any(q.get("dead_letter_depth") is not None for q in queues.values())
    # And the drain column once a queue's process type declares a rate_limit: how long its backlog takes at that rate.
    limited = any(q.get("rate_limit") for q in queues.values())
    rows = []
    for name, q in sorted(queues.items()):
        oldest = duration_words(q.get("oldest_age")) if q.get("oldest_age") is not None else (
            "not stamped" if q.get("oldest_stamped") is False else "-")
        consumers = "?" if q.get("consumers_error") or q.get("error") else str(len(q.get("consumers") or []))
        depth = "?" if q.get("error") else str(q.get("depth", 0))
        row = (name, depth, oldest, consumers)
        if dead:
            row += ("-" if q.get("dead_letter_depth") is None else str(q["dead_letter_depth"]),)
        if limited:
            row += (f"{q['rate_limit']:g}/s, {duration_words(q['drain_seconds'])}" if q.get("rate_limit") else "-",)
        rows.append((*row, q.get("host", "")))
    header = (("QUEUE", "DEPTH", "OLDEST", "CONSUMERS") + (("DEAD LETTERS",) if dead else ())
              + (("RATE LIMIT, DRAIN",) if limited else ()) + ("READ ON",))
    return _table(header, rows)


def singleton_problems(hosts: dict) -> list[str]:
    """A singleton process type (a scheduler) must run on exactly one of the hosts read."""
    where: dict[str, list[str]] = {}
    for host, seen in sorted(hosts.items()):
        for proc in (seen or {}).get("processes") or []:
            if proc.get("singleton"):
                where.setdefault(proc["name"], [])
                if any(i.get("state") == "active" for i in proc["instances"]):
                    where[proc["name"]].append(host)
    problems = []
    for name, running in sorted(where.items()):
        if not running:
            problems.append(f"the singleton {name} runs on no host, so what it schedules does not happen. Next: "
                            "ansible-playbook sturdy.workers.deploy (it starts it on the singleton host), or diagnose "
                            "it there")
        elif len(running) > 1:
            problems.append(f"the singleton {name} runs on {len(running)} hosts ({', '.join(running)}): everything it "
                            "schedules happens more than once. Next: ansible-playbook sturdy.workers.deploy (it stops "
                            "it on every host but the singleton host)")
    return problems


def status_report(results: dict, app: str, now: float, queue_age_limit: float = 600) -> dict:
    from ansible_collections.sturdy.workers.plugins.module_utils.app_status import queue_problems
    from ansible_collections.sturdy.workers.plugins.module_utils.history import describe, merge

    hosts: dict = {}
    problems: list[str] = []
    builds: dict[str, list[str]] = {}
    releases: dict[str, list[str]] = {}
    running: dict[str, list[str]] = {}
    queues: dict[str, dict] = {}
    locks: dict[str, list[str]] = {}
    pauses: dict[str, list[str]] = {}
    rows = []
    for host in sorted(results):
        result = results[host] or {}
        if result.get("unreachable") or result.get("failed") or "processes" not in result:
            why = result.get("msg") or "no status was read"
            hosts[host] = {"error": why}
            problems.append(f"{host}: could not be read ({'unreachable' if result.get('unreachable') else 'failed'}: "
                            f"{str(why).strip()[:300]}). Next: check that the host is up and reachable, then run the "
                            "status again")
            continue
        hosts[host] = {k: result.get(k) for k in ("current", "release", "processes", "problems", "systemd_version",
                                                  "maintenance", "last_run", "paused")}
        if result.get("paused"):
            held = result["paused"]
            pauses.setdefault(f"{', '.join(held.get('processes') or []) or 'every worker'} by "
                              f"{held.get('owner') or 'an unknown owner'} since {held.get('started', '?')}"
                              + (f": \"{held['message']}\"" if held.get("message") else ""), []).append(host)
        if result.get("maintenance"):
            held = result["maintenance"]
            locks.setdefault(f"by {held.get('owner') or 'an unknown owner'} since {held.get('started', '?')}: "
                             f"\"{held.get('message') or ''}\"", []).append(host)
        problems += result.get("problems") or []
        # Every host with workers reads the same broker: the first answer per queue is kept.
        for q in result.get("queues") or []:
            if q.get("queue") and (q["queue"] not in queues or queues[q["queue"]].get("error")):
                queues[q["queue"]] = {**q, "host": host}
        builds.setdefault(result.get("current") or "(none)", []).append(host)
        releases.setdefault(result.get("release") or result.get("current") or "(none)", []).append(host)
        for proc in result["processes"]:
            for inst in proc["instances"]:
                rows.append(_row(host, inst))
                if inst.get("build"):
                    pair = f"{host} {proc['name']}"
                    if pair not in running.setdefault(inst["build"], []):
                        running[inst["build"]].append(pair)
    problems += queue_problems([queues[n] for n in sorted(queues)], queue_age_limit)
    problems += singleton_problems(hosts)
    if len(builds) > 1:
        problems.append("hosts point current at different builds: " + "; ".join(
            f"{b} on {', '.join(h)}" for b, h in sorted(builds.items())) + ". A deploy with --limit or one that failed "
            "on some hosts left them so. Next: deploy one build to every host (ansible-playbook sturdy.workers.deploy)")
    if len(running) > 1:
        problems.append("processes run different builds (producers and workers may not agree on task names and "
                        "payloads): " + "; ".join(f"{b}: {', '.join(p)}" for b, p in sorted(running.items()))
                        + ". Next: deploy one build everywhere, or restart the processes left on the old one "
                        "(ansible-playbook sturdy.workers.restart)")
    stamp = datetime.datetime.fromtimestamp(now, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    summary = [f"{app} at {stamp}: " + ("OK, no problems" if not problems else f"{len(problems)} problem(s)")]
    summary += _table(COLUMNS, rows) if rows else ["(no process of the app on any host)"]
    if queues:
        summary += _queue_rows(queues)
    summary.append("current: " + "; ".join(f"{b} on {', '.join(h)}" for b, h in sorted(releases.items())) if releases
                   else "current: (no host read)")
    # Not a problem: an operator took it on purpose.
    summary += [f"MAINTENANCE locked {text} on {', '.join(h)}: deploys, rollbacks and restarts are refused until "
                "ansible-playbook sturdy.workers.unlock" for text, h in sorted(locks.items())]
    # The newest run any host recorded, merged with the entries of the hosts whose last run it was too.
    runs = merge({h: [v["last_run"]] for h, v in hosts.items() if v.get("last_run")})
    last_run = runs[0] if runs else None
    if last_run:
        last_run["missing"] = []
        summary.append("last run: " + describe(last_run) + " (all runs: ansible-playbook sturdy.workers.history)")
    summary += [f"PAUSED {text} on {', '.join(h)}: they take no message, the queues grow on purpose (no problem is "
                "raised for it); the tasks they were running finish. Next, when it is over: ansible-playbook sturdy.workers.resume"
                for text, h in sorted(pauses.items())]
    summary += [f"PROBLEM {p}" for p in problems]
    return {"app": app, "time": now, "builds": builds, "releases": releases, "running": running, "queues": queues,
            "hosts": hosts, "maintenance": locks, "paused": pauses, "last_run": describe(last_run) if last_run else None,
            "problems": problems,
            "summary": summary}


class FilterModule:
    def filters(self):
        return {"status_report": status_report}
