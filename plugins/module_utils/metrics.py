# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An app's status on one host as Prometheus metrics, in node_exporter's textfile format: pure logic.

The collector (roles/observe/files/sturdy_metrics.py, run by the sturdy-metrics-<app> timer) reads the host with
app_status.collect() and the agent's task counts, and writes what metrics_text() returns. The alert rules shipped
with the collection (roles/observe/files/sturdy_workers.rules.yml) read these names: change both together.
"""

from __future__ import annotations

import glob
import json
import os
import re

OUTCOMES = ("succeeded", "failed", "retried")

HELP = {
    "sturdy_up": ("gauge", "1 when the instance is active with a main process, else 0."),
    "sturdy_build_info": ("gauge", "The build the instance's process really runs (from its own release)."),
    "sturdy_restarts_total": ("counter", "Automatic restarts of the instance by systemd (NRestarts)."),
    "sturdy_restarts_last_hour": ("gauge", "Automatic restarts of the instance by systemd in the last hour."),
    "sturdy_old_release": ("gauge", "1 when the instance runs another build than the host's current release."),
    "sturdy_current_build_info": ("gauge", "The build the host's current release link points at."),
    "sturdy_current_release_info": ("gauge", "The host's live release: its build and its config (<build>~<n>)."),
    "sturdy_queue_depth": ("gauge", "Messages waiting in the queue."),
    "sturdy_queue_consumers": ("gauge", "Workers that consume the queue and answered a ping."),
    "sturdy_queue_oldest_age_seconds": ("gauge", "How long the oldest waiting message has waited (0 when empty)."),
    "sturdy_queue_dead_letter_depth": ("gauge", "Messages in the queue's dead-letter queue (where the broker has one)."),
    "sturdy_queue_failed_jobs": ("gauge", "Jobs in RQ's failed job registry for the queue (RQ queues)."),
    "sturdy_queue_paused": ("gauge", "1 while the workers consuming the queue are paused on purpose (sturdy.workers.pause)."),
    "sturdy_queue_read_ok": ("gauge", "1 when the queue could be read through the app's broker connection."),
    "sturdy_queue_age_limit_seconds": ("gauge", "The oldest age over which the queue is a problem "
                                                "(sturdy_status_queue_age_limit)."),
    "sturdy_tasks_total": ("counter", "Tasks the app's workers finished, by build and outcome, counted by the agent."),
    "sturdy_last_deploy_timestamp_seconds": ("gauge", "When the last deploy to this host finished."),
    "sturdy_last_deploy_success": ("gauge", "1 when the last deploy to this host succeeded, else 0."),
    "sturdy_last_deploy_info": ("gauge", "The build and result of the last deploy to this host."),
    "sturdy_metrics_timestamp_seconds": ("gauge", "When these metrics were collected."),
}


def _escape(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict) -> str:
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in labels.items()) + "}"


def _number(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(float(value)) if isinstance(value, float) else str(int(value))


def read_counts(directory: str) -> dict[str, dict]:
    """The agent's task counts ($STATE_DIRECTORY/sturdy-counts/<unit>.json): {unit: {build: {outcome: n}}}.
    Unreadable files are skipped (a count is lost, the metrics are not)."""
    found = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        try:
            # The agent replaces the file whole: no lock needed to read it.
            with open(path, encoding="utf-8") as fh:
                counts = json.load(fh)
        except (OSError, ValueError):
            continue
        if isinstance(counts, dict):
            found[os.path.basename(path)[:-len(".json")]] = counts
    return found


def read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            found = json.load(fh)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def samples(status: dict, plan: dict, counts: dict[str, dict], last_deploy: dict, age_limit: float,
            now: float) -> list[tuple[str, dict, float]]:
    """(name, labels, value) for every metric of one host's status (app_status.collect())."""
    app = plan["app"]
    out = []
    for proc in status.get("processes", []):
        for inst in proc.get("instances", []):
            labels = {"app": app, "process": proc["name"], "unit": inst["unit"]}
            out.append(("sturdy_up", labels, inst["state"] == "active" and inst.get("pid") is not None))
            if inst.get("pid") is not None:
                out.append(("sturdy_build_info", {**labels, "build": inst.get("build") or "unknown"}, 1))
            out.append(("sturdy_restarts_total", labels, inst.get("restarts", 0)))
            # As status counts them: restarts of the last hour since the last deliberate start (NRestarts), so a unit
            # restarted on purpose after its crashes is not crash-looping now.
            out.append(("sturdy_restarts_last_hour", labels,
                        inst.get("restarts_last_hour", 0) if inst.get("restarts") else 0))
            out.append(("sturdy_old_release", labels, bool(inst.get("old_release"))))
    if status.get("current"):
        out.append(("sturdy_current_build_info", {"app": app, "build": status["current"]}, 1))
        out.append(("sturdy_current_release_info", {"app": app, "release": status.get("release") or status["current"],
                                                    "build": status["current"]}, 1))
    for queue in status.get("queues", []):
        labels = {"app": app, "queue": queue.get("queue")}
        out.append(("sturdy_queue_read_ok", labels, not queue.get("error")))
        out.append(("sturdy_queue_paused", labels, bool(queue.get("paused"))))
        if queue.get("error"):
            continue
        out.append(("sturdy_queue_depth", labels, queue.get("depth") or 0))
        if not queue.get("consumers_error"):
            out.append(("sturdy_queue_consumers", labels, len(queue.get("consumers") or [])))
        if queue.get("dead_letter_depth") is not None:
            out.append(("sturdy_queue_dead_letter_depth", labels, queue["dead_letter_depth"]))
        if queue.get("failed_jobs") is not None:
            out.append(("sturdy_queue_failed_jobs", labels, queue["failed_jobs"]))
        age = 0.0 if not queue.get("depth") else queue.get("oldest_age")
        if age is not None:
            out.append(("sturdy_queue_oldest_age_seconds", labels, float(age)))
    out.append(("sturdy_queue_age_limit_seconds", {"app": app}, float(age_limit)))
    # Per unit: a sum over units would drop when one unit's file is reset, which Prometheus reads as a reset of all.
    patterns = [(proc["name"], re.compile(proc["unit_pattern"])) for proc in plan.get("processes", [])]
    for unit, by_build in sorted(counts.items()):
        name = next((n for n, pattern in patterns if pattern.match(unit)), unit)
        for build, outcomes in sorted(by_build.items()):
            for outcome in OUTCOMES:
                out.append(("sturdy_tasks_total", {"app": app, "process": name, "unit": unit, "build": build,
                                                   "outcome": outcome}, int((outcomes or {}).get(outcome, 0))))
    if last_deploy.get("finished"):
        out.append(("sturdy_last_deploy_timestamp_seconds", {"app": app}, float(last_deploy["finished"])))
        out.append(("sturdy_last_deploy_success", {"app": app}, last_deploy.get("result") == "success"))
        out.append(("sturdy_last_deploy_info", {"app": app, "build": last_deploy.get("build", ""),
                                                "result": last_deploy.get("result", "")}, 1))
    out.append(("sturdy_metrics_timestamp_seconds", {"app": app}, float(now)))
    return out


def metrics_text(metrics: list[tuple[str, dict, float]]) -> str:
    """The textfile: each metric's HELP and TYPE once, then its samples."""
    lines = []
    for name, (kind, words) in HELP.items():
        rows = [(labels, value) for metric, labels, value in metrics if metric == name]
        if not rows:
            continue
        lines += [f"# HELP {name} {words}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{_labels(labels)} {_number(value)}" for labels, value in rows]
    return "\n".join(lines) + "\n"
