# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""sturdy.workers metrics collector: one app on this host, as node_exporter textfile metrics.

Run by sturdy-metrics-<app>.service (its timer), as root: it reads systemd, the journal and /proc like
`ansible-playbook sturdy.workers.status`, and the queues through the agent in the current release as the app's user
with its secrets (systemd-run). Usage: sturdy_metrics.py /etc/sturdy-workers/<app>.metrics.json

The logic is the collection's own module_utils, installed beside this file by the sturdy.workers.observe role.
"""

import json
import os
import subprocess
import sys
import time

# pylint: disable=wrong-import-position
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ansible_collections.sturdy.workers.plugins.module_utils.app_status import CollectError, collect  # noqa: E402
from ansible_collections.sturdy.workers.plugins.module_utils.metrics import (  # noqa: E402
    metrics_text, read_counts, read_json, samples)
from ansible_collections.sturdy.workers.plugins.module_utils.names import TASK_COUNTS  # noqa: E402
from ansible_collections.sturdy.workers.plugins.module_utils.secret_mask import host_masker  # noqa: E402
from ansible_collections.sturdy.workers.plugins.module_utils.systemd_query import ENV  # noqa: E402


def run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env={**os.environ, **ENV})
    return done.returncode, done.stdout, done.stderr


def main(config_path: str) -> int:
    with open(config_path, encoding="utf-8") as fh:
        config = json.load(fh)
    plan = config["plan"]
    try:
        status = collect(plan, config.get("host", ""), run, queue_timeout=config.get("queue_timeout", 1.0),
                         journal_since="-1h")
    except CollectError as exc:
        # The last file stays as it was: its sturdy_metrics_timestamp_seconds ages and SturdyMetricsStale fires.
        sys.stderr.write(f"sturdy-metrics: {plan['app']}: cannot read the host: {exc}. The metrics keep their last "
                         "values and SturdyMetricsStale fires. Next: is systemd answering (systemctl status)?\n")
        return 1
    text = metrics_text(samples(status, plan, read_counts(os.path.join(plan["state_dir"], TASK_COUNTS)),
                                read_json(plan["last_deploy"]), config.get("queue_age_limit", 600), time.time()))
    # The agent's error lines are the app's own: no secret value goes into the journal.
    mask = host_masker(plan.get("secrets", {}).get("directives", []), run)
    for queue in status.get("queues", []):
        if queue.get("error"):
            sys.stderr.write(mask(f"sturdy-metrics: {plan['app']}: queue {queue.get('queue')}: {queue['error']}. "
                                  "Next: check the broker and BROKER_URL in the app's secrets\n"))
    path = config["textfile"]
    # node_exporter must never read a half-written file: write beside it, then rename.
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
