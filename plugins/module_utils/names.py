# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The names the collection, the worker agent and the metrics collector share: defined here once.

The modules and the metrics collector import them (the observe role installs this file beside the collector). The
agent (roles/release/files/sturdy_agent.py) runs in the app's venv without the collection and keeps its own copies;
tests/unit/plugins/test_names.py fails when one differs from this file."""

from __future__ import annotations

# A release's record file, in a build's directory (/srv/<app>/releases/<build>/) and in a release config's.
RELEASE_FILE = "RELEASE.json"
# Each worker instance's own smoke queue: sturdy.smoke.<app>-<process>@<n>.<host>.
SMOKE_PREFIX = "sturdy.smoke."
# The Celery task and the RQ job that answer a smoke job.
SMOKE_TASK = "sturdy.smoke"
RQ_SMOKE_JOB = "sturdy_agent.rq_smoke"
# A queue's dead-letter queue: sturdy.dead.<queue>.
DEAD_PREFIX = "sturdy.dead."
# Under the units' state directory (/var/lib/<app>): the records of the tasks each process runs, and the counts of
# the tasks finished, by build and outcome.
TASK_RECORDS = "sturdy-tasks"
TASK_COUNTS = "sturdy-counts"
# Deliveries of a message after which the agent moves it to its dead-letter queue, unless a process type sets
# max_deliveries.
DEFAULT_MAX_DELIVERIES = 5
