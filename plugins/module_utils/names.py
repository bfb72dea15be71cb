# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The names the collection, the worker agent and the metrics collector share: defined here once.

The modules import this file; the observe role installs it beside the metrics collector, and the release module
writes it into every release's venv as sturdy_agent/names.py (the agent package, roles/release/files/sturdy_agent/,
imports it from there). Standard library only, no imports: it must run in all three places."""

from __future__ import annotations

# Beside the releases (/srv/<app>/): while this file exists, every deploy, rollback and restart is refused (the
# maintenance lock: sturdy.workers.lock and unlock).
MAINTENANCE_LOCK = ".maintenance.lock"
# Beside the releases (/srv/<app>/): while this file exists, the workers of the process types it names (all when it
# names none) take no message from their queues (sturdy.workers.pause and resume); their smoke queues stay consumed.
PAUSED = ".paused"
# Beside the releases: every deploy, rollback and restart of the app on this host, one JSON line each, appended at
# its end (sturdy.workers.history prints the fleet's).
HISTORY = "history.jsonl"
# A release's record file, in a build's directory (/srv/<app>/releases/<build>/) and in a release config's.
RELEASE_FILE = "RELEASE.json"
# Each worker instance's own smoke queue: sturdy.smoke.<app>-<process>@<n>.<host>.
SMOKE_PREFIX = "sturdy.smoke."
# The Celery task and the RQ job that answer a smoke job.
SMOKE_TASK = "sturdy.smoke"
RQ_SMOKE_JOB = "sturdy_agent.rq_smoke"
# The environment variable that tells the agent's `stats` how many Celery workers should answer for their queues: it
# stops waiting once that many did, instead of waiting out its timeout. (Not an option: an agent installed by an
# older version of the collection ignores it.)
CONSUMERS_EXPECTED_ENV = "STURDY_CONSUMERS_EXPECTED"
# A queue's dead-letter queue: sturdy.dead.<queue>.
DEAD_PREFIX = "sturdy.dead."
# The headers the agent adds to a message: when it was published (a UNIX time), how often its dead letter was
# requeued, and, prefixed, why and where it was dead-lettered (sturdy_dead_reason, _queue, _build, _host, _at,
# _deliveries).
SENT_HEADER = "sturdy_sent"
REQUEUES_HEADER = "sturdy_requeues"
DEAD_HEADER = "sturdy_dead_"
# Under the units' state directory (/var/lib/<app>): the records of the tasks each process runs, and the counts of
# the tasks finished, by build and outcome.
TASK_RECORDS = "sturdy-tasks"
TASK_COUNTS = "sturdy-counts"
# Deliveries of a message after which the agent moves it to its dead-letter queue, unless a process type sets
# max_deliveries.
DEFAULT_MAX_DELIVERIES = 5


def socket_unit(service: str) -> str:
    """The socket unit that holds the port of a service (sturdy_processes[].listen): shop-web@1.service ->
    shop-web@1.socket, shop-web@.service -> shop-web@.socket."""
    return service.rsplit(".", 1)[0] + ".socket"
