# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: deploy_report
short_description: The deploy report of sturdy.workers.deploy, from what each host recorded
version_added: 0.2.0
author: sturdy.workers contributors (@sturdy-workers)
description:
  - Builds the report the deploy playbook prints and writes as JSON; build IDs before and after per host,
    per-phase durations, per-instance smoke latency and build, C(NRestarts) before and after, failures and rollback.
options:
  _input:
    description: The hostvars of the play's hosts.
    type: list
    elements: dict
    required: true
  run:
    description: The run (C(id), C(owner), C(started) as a UNIX time).
    type: dict
    required: true
  build_id:
    description: The build deployed.
    type: str
    required: true
  finished:
    description: UNIX time the deploy ended.
    type: float
    required: true
  text:
    description: Return a few lines of text for the console instead of the dictionary.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Print the report
  ansible.builtin.debug:
    msg: >-
      {{ ansible_play_hosts_all | map('extract', hostvars)
         | sturdy.workers.deploy_report(run, build, now().timestamp(), text=true) }}
"""

RETURN = r"""
_value:
  description: The report (a dictionary), or its text lines with O(text=true).
  type: raw
"""


def _get(data, *keys, default=None):
    for key in keys:
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return default
    return data


def _instances(hv) -> dict:
    before = _get(hv, "__sturdy_deploy_before", "units", default={}) or {}
    after = _get(hv, "__sturdy_deploy_after", "units", default={}) or {}
    smoked = {}
    for result in _get(hv, "sturdy_smoke_test_instances", "results", default=[]) or []:
        for entry in result.get("instances", []) if isinstance(result, dict) else []:
            smoked[entry.get("unit")] = entry
    found = {}
    for unit in sorted(set(before) | set(after)):
        if not unit.endswith(".service"):
            continue
        b, a, s = before.get(unit, {}), after.get(unit, {}), smoked.get(unit, {})
        found[unit] = {
            "nrestarts_before": b.get("NRestarts"),
            "nrestarts_after": a.get("NRestarts"),
            "restarted": bool(b.get("InvocationID")) and b.get("InvocationID") != a.get("InvocationID"),
            "active": a.get("ActiveState"),
            "smoke_build": _get(s, "answer", "build_id"),
            "smoke_latency": s.get("latency"),
        }
    return found


def deploy_report(hostvars, run, build_id, finished, text=False):
    hosts, marks = {}, {}
    failures, app = [], None
    for hv in hostvars:
        name = hv["inventory_hostname"]
        app = app or hv.get("sturdy_app")
        switch = hv.get("__sturdy_release_switch") or {}
        for phase, at in (hv.get("__sturdy_deploy_marks") or {}).items():
            marks.setdefault(phase, []).append(float(at))
        if hv.get("__sturdy_deploy_failure"):
            failures.append(hv["__sturdy_deploy_failure"])
        hosts[name] = {
            "from": switch.get("previous") if switch.get("changed") else switch.get("current"),
            "to": switch.get("current"),
            "switched": bool(switch.get("changed")),
            "rolled_back_to": hv.get("__sturdy_deploy_rolled_back"),
            "instances": _instances(hv),
        }
    started = float(run["started"])
    order = ["preflight", "install", "migrate", "restart"]
    phases, last = {}, started
    for phase in order:
        if phase in marks:
            end = max(marks[phase])
            phases[phase] = round(end - last, 1)
            last = end
    phases["finish"] = round(float(finished) - last, 1)
    rolled_back = any(h["rolled_back_to"] for h in hosts.values())
    report = {
        "app": app, "build_id": build_id, "run_id": run.get("id"), "owner": run.get("owner"),
        "result": "success" if not failures else ("rolled_back" if rolled_back else "failed"),
        "failures": failures, "seconds": round(float(finished) - started, 1), "phases": phases, "hosts": hosts,
    }
    if not text:
        return report
    lines = [f"deploy {app} {build_id}: {report['result']} in {report['seconds']}s "
             f"({', '.join(f'{k} {v}s' for k, v in phases.items())})"]
    for name, host in hosts.items():
        lines.append(f"{name}: {host['from']} -> {host['to']}"
                     + (f", rolled back to {host['rolled_back_to']}" if host["rolled_back_to"] else ""))
        for unit, inst in host["instances"].items():
            smoke = (f"smoke {inst['smoke_build']} in {inst['smoke_latency']}s" if inst["smoke_build"] else "no smoke job")
            lines.append(f"  {unit}: {inst['active']}, {'restarted' if inst['restarted'] else 'not restarted'}, "
                         f"NRestarts {inst['nrestarts_before']} -> {inst['nrestarts_after']}, {smoke}")
    lines += [f"FAILED: {f}" for f in failures]
    return lines


class FilterModule:
    def filters(self):
        return {"deploy_report": deploy_report}
