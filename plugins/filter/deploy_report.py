# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: deploy_report
short_description: The report of a sturdy.workers deploy, from what each host recorded
version_added: 0.1.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Builds the report the C(sturdy.workers.deploy) role prints and writes as JSON from the record each host kept
    during the run; build IDs before and after per host, per-phase durations, per-instance restart time, smoke
    latency and build, C(NRestarts) before and after, failures and rollback, and the message the run fails with.
options:
  _input:
    description:
      - Host name to its record, a dictionary with C(marks) (phase name to the UNIX time it ended), C(failure),
        C(before) and C(after) (M(sturdy.workers.unit_health) units), C(switch) (C(changed), C(current),
        C(previous), and the releases of M(sturdy.workers.release_config) C(release) and C(from)), C(release_before),
        C(release), C(rolled_back_release), C(migrations_since), C(smoke) (M(sturdy.workers.smoke_test) results),
        C(restarted) (M(sturdy.workers.rolling_restart)
        C(restarted)), C(surge) (its C(surge)), C(rolled_back_to), C(rollback_failure) (C(task), C(msg), C(current)), C(queues)
        (M(sturdy.workers.app_status) C(queues), on the host that read them) and C(queue_smoke)
        (M(sturdy.workers.smoke_test) C(queues), the real-queue smoke on that host).
    type: dict
    required: true
  run:
    description: The run (C(id), C(owner), C(started) as a UNIX time, C(batches), the host batches of its rollout).
    type: dict
    required: true
  plan:
    description: The app plan (P(sturdy.workers.app_plan#filter)); its C(app), C(build_id) and C(target) are used.
    type: dict
    required: true
  finished:
    description: UNIX time the deploy ended.
    type: float
    required: true
  rollback:
    description: Whether a failure rolls the switched hosts back (C(sturdy_deploy_rollback)); words the message.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Print the report
  ansible.builtin.debug:
    msg: >-
      {{ (dict(ansible_play_hosts_all | zip(ansible_play_hosts_all | map('extract', hostvars)
          | map(attribute='__sturdy_deploy_record')))
          | sturdy.workers.deploy_report(run, plan, now().timestamp())).summary }}
"""

RETURN = r"""
_value:
  description:
    - The report, a dictionary with C(app), C(build_id), C(run_id), C(owner), C(batches) (the rollout's host
      batches, P(sturdy.workers.batches#filter)), C(result) (C(success), C(failed) or
      C(rolled_back)), C(failures), C(seconds), C(phases), C(hosts) (per host C(from), C(to), C(switched),
      C(unchanged) (nothing differed from the last successful deploy of the build, so only smoke jobs ran),
      C(differs) (why a host already on the build was deployed in full again), C(release_from) and C(release) (the
      releases, a build with its config), C(rolled_back_to), C(rolled_back_release), C(migrations_since) (the
      migrations a rollback did not undo) and C(instances),
      each with its smoke answer's build, latency, C(smoke_ran_in), C(scaled_down) (it ran before and is no longer
      declared, so it was stopped on purpose),
      C(smoke_busy), C(settings), the worker's reliability settings as it runs them, C(stop_seconds) and
      C(stop_timed_out), whether its stop used the whole C(TimeoutStopSec=)), C(queues) (per Celery
      queue after the deploy, C(depth), C(oldest_age), C(dead_letter_depth), C(consumers), C(rate_limit),
      C(drain_seconds) or C(error), and C(smoke), its real-queue smoke entry), C(message) (why the run failed and
      what happened to the hosts) and C(summary) (lines for the console).
  type: dict
"""

PHASES = ("preflight", "install", "migrate", "restart")


def _get(data, *keys, default=None):
    for key in keys:
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return default
    return data


def _instances(record: dict) -> dict:
    before, after = record.get("before") or {}, record.get("after") or {}
    smoked = {e.get("unit"): e for result in record.get("smoke") or [] if isinstance(result, dict)
              for e in result.get("instances") or []}
    restarted = {e.get("name"): e for e in record.get("restarted") or []}
    surge = {e.get("name") for e in record.get("surge") or []}
    found = {}
    for unit in sorted(set(before) | set(after)):
        if not unit.endswith(".service") or unit in surge:
            continue
        b, a, s = before.get(unit, {}), after.get(unit, {}), smoked.get(unit, {})
        found[unit] = {
            "nrestarts_before": b.get("NRestarts"),
            "nrestarts_after": a.get("NRestarts"),
            # A new invocation of a unit that ran before; a unit gone since (a surge instance that drained) was not.
            "restarted": bool(b.get("InvocationID") and a.get("InvocationID")) and b["InvocationID"] != a["InvocationID"],
            # Not running before the deploy (a first deploy, a new instance), running after it.
            "started": not b.get("InvocationID") and bool(a.get("InvocationID")),
            "restart_seconds": _get(restarted, unit, "seconds"),
            # How long the old process took to stop: a warm shutdown waits for the tasks it runs.
            "stop_seconds": _get(restarted, unit, "stop_seconds"),
            # The stop used its whole TimeoutStopSec=: systemd SIGKILLed the tasks still running.
            "stop_timed_out": bool(_get(restarted, unit, "stop_timed_out")),
            "active": a.get("ActiveState"),
            # Ran before, no longer a member of the app's target after (the instances of its process type were
            # lowered, or the process type was removed): stopped on purpose.
            "scaled_down": (b.get("ActiveState") in ("active", "activating", "reloading") and bool(after)
                            and unit not in after),
            "smoke_build": _get(s, "answer", "build_id"),
            "smoke_latency": s.get("latency"),
            # "worker": every pool slot was busy, so the main process answered; smoke_busy names what ran there.
            "smoke_ran_in": _get(s, "answer", "ran_in"),
            "smoke_busy": _get(s, "answer", "busy") or [],
            # The worker's reliability settings as it runs them (acks, prefetch, time limit, pool, child recycling).
            "settings": _get(s, "answer", "settings") or {},
        }
    return found


def _message(report: dict, rollback_failures: list[str], rollback: bool) -> str:
    if report["result"] == "success":
        return ""
    rolled_back = sorted({h["rolled_back_release"] or h["rolled_back_to"] for h in report["hosts"].values()
                          if h["rolled_back_to"]})
    if rolled_back:
        outcome = (f"Rolled back to {', '.join(rolled_back)} on the switched hosts, code and config; the bad release "
                   "stays under releases/ for inspection." + migrations_words(report["hosts"]))
    elif rollback_failures:
        outcome = ""
    elif rollback:
        outcome = ("Nothing was rolled back: no host was switched from another build by this deploy (the same build, "
                   "or a first deploy), so the hosts keep what the failed step left.")
    else:
        outcome = "Not rolled back (sturdy_deploy_rollback=false)."
    return " ".join(filter(None, [f"Deploy of {report['build_id']} failed: {' || '.join(report['failures'])}",
                                  " || ".join(rollback_failures), outcome]))


def migrations_words(hosts: dict) -> str:
    """What a rollback does not undo: the migrations that ran since the release it went back to was live."""
    ran = {}
    for host in hosts.values():
        for m in host.get("migrations_since") or []:
            ran.setdefault((m.get("release"), " ".join(m.get("command") or []), m.get("host"), m.get("at")), 1)
    if not ran:
        return ""
    said = "; ".join(f"the migration of release {rel} ({cmd}) ran on {where} at {at}" for rel, cmd, where, at in ran)
    return (f" Since that release was live, {said}: a rollback does not undo a migration, so the schema stays as it "
            "left it. Whether to reverse it is your decision; the build rolled back to must work with it.")


def _queue_line(name: str, q: dict) -> str:
    """A queue after the deploy: its backlog, how long a rate-limited one takes to drain, its dead letters."""
    # Imported here: ansible loads every filter file to find one filter (tests/unit/plugins/filter/test_filter_imports).
    from ansible_collections.sturdy.workers.plugins.module_utils.app_status import duration_words

    if q.get("error"):
        return f"queue {name}: not read ({q['error']})"
    depth = q.get("depth") or 0
    words = [] if "depth" not in q else [
        f"{depth} waiting" + (f", the oldest for {duration_words(q['oldest_age'])}" if depth and q.get("oldest_age")
                              else "")]
    if depth and q.get("rate_limit"):
        words.append(f"drains in {duration_words(q['drain_seconds'])} at the soonest (rate_limit "
                     f"{q['rate_limit']:g}/s)")
    if q.get("dead_letter_depth"):
        words.append(f"{q['dead_letter_depth']} dead letter(s) (ansible-playbook sturdy.workers.dead_letters lists them)")
    smoke = q.get("smoke") or {}
    if smoke.get("backlog"):
        builds = sorted({str(c.get("build_id")) for c in smoke.get("consumers") or []})
        words.append(f"no smoke job sent behind the {smoke['backlog']} then waiting: consumed by "
                     f"{len(smoke.get('consumers') or [])} worker(s) on build {', '.join(builds) or '-'}")
    elif smoke.get("ok"):
        words.append(f"smoke job answered by build {_get(smoke, 'answer', 'build_id')} in {smoke.get('latency')}s")
    return f"queue {name}: " + ", ".join(words)


def deploy_report(records, run, plan, finished, rollback=True):
    hosts, marks, failures, rollback_failures, queues = {}, {}, [], [], {}
    # Each queue is read on one host and smoke-tested from one host, not necessarily the same.
    smoked = {q.get("queue"): q for record in records.values() for q in (record or {}).get("queue_smoke") or []
              if isinstance(q, dict)}
    for name, record in records.items():
        record = record or {}
        for q in record.get("queues") or []:
            queues[q["queue"]] = {k: q.get(k) for k in ("depth", "oldest_age", "dead_letter_depth", "consumers",
                                                        "rate_limit", "drain_seconds", "error")}
            queues[q["queue"]]["smoke"] = smoked.get(q["queue"])
        switch = record.get("switch") or {}
        for phase, at in (record.get("marks") or {}).items():
            marks.setdefault(phase, []).append(float(at))
        if record.get("failure"):
            failures.append(record["failure"])
        broken = record.get("rollback_failure")
        if broken:
            rollback_failures.append(
                f"ROLLBACK FAILED on {name} at '{broken.get('task')}': {broken.get('msg')} current points at "
                f"{broken.get('current')}; check the units (systemctl status {plan.get('target')}) and restart them "
                "by hand.")
        unchanged = bool(record.get("unchanged"))
        hosts[name] = {
            "from": plan.get("build_id") if unchanged else (
                switch.get("previous") if switch.get("changed") else switch.get("current")),
            "to": plan.get("build_id") if unchanged else switch.get("current"),
            # Nothing differed from the last successful deploy of the build: only the smoke jobs ran.
            "unchanged": unchanged,
            # Why a host that ran the build already was deployed in full again.
            "differs": record.get("differs") or "",
            "switched": bool(switch.get("changed")),
            "rolled_back_to": record.get("rolled_back_to"),
            # The releases (a build and its config: <build>, or <build>~<n> for another config of it) before and
            # after, the one a rollback went back to, and the migrations that ran since it was live.
            "release_from": switch.get("from") or record.get("release_before") if not unchanged
            else record.get("release_before"),
            "release": switch.get("release") or record.get("release") or record.get("release_before"),
            "rolled_back_release": record.get("rolled_back_release") or None,
            "migrations_since": record.get("migrations_since") or [],
            "instances": _instances(record),
            # Started beside the instances before their restart, told to stop after it.
            "surge": record.get("surge") or [],
        }
    for queue, smoke in smoked.items():
        # A queue no host read (not Celery's or RQ's): its smoke job alone.
        queues.setdefault(queue, {"smoke": smoke})
    started = float(run["started"])
    phases, last = {}, started
    for phase in PHASES:
        if phase in marks:
            end = max(marks[phase])
            phases[phase] = round(end - last, 1)
            last = end
    phases["finish"] = round(float(finished) - last, 1)
    rolled_back = any(h["rolled_back_to"] for h in hosts.values())
    report = {
        "app": plan.get("app"), "build_id": plan.get("build_id"), "run_id": run.get("id"), "owner": run.get("owner"),
        "batches": run.get("batches"),
        "result": "success" if not failures else ("rolled_back" if rolled_back else "failed"),
        "failures": failures, "seconds": round(float(finished) - started, 1), "phases": phases, "hosts": hosts,
        "queues": queues,
    }
    report["message"] = _message(report, rollback_failures, rollback)
    lines = [f"deploy {report['app']} {report['build_id']}: {report['result']} in {report['seconds']}s "
             f"({', '.join(f'{k} {v}s' for k, v in phases.items())})"]
    for name, host in hosts.items():
        if host["unchanged"]:
            lines.append(f"{name}: {host['to']}, unchanged since its last deploy: nothing installed, written or "
                         "restarted, the instances proven by their smoke jobs (-e sturdy_deploy_force=true redoes "
                         "every step)")
        else:
            lines.append(f"{name}: {host['release_from'] or host['from'] or '(no release)'} -> "
                         f"{host['release'] or host['to']}"
                         # Why the live build was deployed again in full; a switch from another build needs none.
                         + (f", again in full ({host['differs']})" if host["differs"] and host["from"] == host["to"]
                            else "")
                         + (f", rolled back to {host['rolled_back_release'] or host['rolled_back_to']}"
                            if host["rolled_back_to"] else ""))
        for unit, inst in host["instances"].items():
            smoke = (f"smoke {inst['smoke_build']} in {inst['smoke_latency']}s" if inst["smoke_build"] else "no smoke job")
            if inst["smoke_ran_in"] == "worker":
                longest = max((b.get("running_for") or 0 for b in inst["smoke_busy"]), default=0)
                smoke += (f" (answered by the worker: every slot busy with {len(inst['smoke_busy'])} task(s), the "
                          f"longest running {longest:g}s)")
            took = f" in {inst['restart_seconds']}s" if inst["restart_seconds"] is not None else ""
            if inst["stop_timed_out"]:
                took += (f" (its stop waited {inst['stop_seconds']}s, its whole TimeoutStopSec=, and systemd SIGKILLed "
                         "the tasks still running: with acks_late the broker hands them out again, to run from the "
                         "start)")
            elif inst["stop_seconds"]:
                took += f" (its stop waited {inst['stop_seconds']}s for running tasks)"
            if inst["scaled_down"]:
                lines.append(f"  {unit}: stopped (scaled down: no longer declared), NRestarts "
                             f"{inst['nrestarts_before'] or '-'} before")
                continue
            how = ("restarted" + took if inst["restarted"] else "started" if inst["started"] else "not restarted")
            lines.append(f"  {unit}: {inst['active'] or 'state unknown'}, {how}, "
                         f"NRestarts {inst['nrestarts_before'] or '-'} -> {inst['nrestarts_after'] or '-'}, {smoke}")
        for unit in host["surge"]:
            lines.append(f"  {unit.get('name')}: surge, ready in {unit.get('ready_seconds')}s before any instance was "
                         "stopped; told to stop once they were back (it finishes its running tasks, then exits)")
    lines += [_queue_line(name, q) for name, q in queues.items()]
    lines += [f"FAILED: {f}" for f in failures] + rollback_failures
    report["summary"] = lines
    return report


class FilterModule:
    def filters(self):
        return {"deploy_report": deploy_report}
