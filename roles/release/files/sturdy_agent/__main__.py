# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""python -m sturdy_agent: the commands the deploy and operators run from a release, each printing JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import client, rq_client
from .core import own_smoke_queue
from .names import CONSUMERS_EXPECTED_ENV


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sturdy_agent")
    sub = parser.add_subparsers(dest="command", required=True)
    smoke_cmd = sub.add_parser("smoke", help="send a smoke job to each queue; print the answers as JSON")
    smoke_cmd.add_argument("--celery-app", required=True)
    smoke_cmd.add_argument("--timeout", type=float, default=30.0)
    smoke_cmd.add_argument("queues", nargs="+")
    rq_cmd = sub.add_parser("rq-smoke", help="send a smoke job through RQ to each queue (Redis URL: $RQ_REDIS_URL); "
                                             "print the answers as JSON")
    rq_cmd.add_argument("--timeout", type=float, default=30.0)
    rq_cmd.add_argument("queues", nargs="+")
    rq_stats_cmd = sub.add_parser("rq-stats", help="print depth, oldest job, workers and failed jobs of each RQ queue")
    rq_stats_cmd.add_argument("queues", nargs="+")
    rq_jobs_cmd = sub.add_parser("rq-jobs", help="print each RQ job's status and queue")
    rq_jobs_cmd.add_argument("ids", nargs="+")
    sub.add_parser("queue", help="print the smoke queue of this unit (from STURDY_APP/PROCESS/INSTANCE)")
    stats_cmd = sub.add_parser("stats", help="print depth, oldest message and consumers of each queue as JSON")
    stats_cmd.add_argument("--celery-app", required=True)
    stats_cmd.add_argument("--timeout", type=float, default=1.0, help="how long workers have to answer the ping")
    stats_cmd.add_argument("queues", nargs="+")
    health_cmd = sub.add_parser("health", help="ask every worker for its build, release, queues and running tasks")
    health_cmd.add_argument("--celery-app", required=True)
    health_cmd.add_argument("--timeout", type=float, default=1.0, help="how long workers have to answer")
    dead_cmd = sub.add_parser("dead", help="list, requeue or discard the dead letters of each queue")
    dead_cmd.add_argument("action", choices=["list", "requeue", "discard"])
    dead_cmd.add_argument("--celery-app", required=True)
    dead_cmd.add_argument("--limit", type=int, default=0, help="at most this many (list: 1000; else: all)")
    dead_cmd.add_argument("--confirm-discard", action="store_true", help="discard deletes them for good")
    dead_cmd.add_argument("queues", nargs="+", help="the live queues (their dead letters are in sturdy.dead.<queue>)")
    names_cmd = sub.add_parser("names", help="print the task names the app registers (no worker started) and, per "
                                             "queue, the task names of its waiting messages (Redis)")
    names_cmd.add_argument("--celery-app", required=True)
    names_cmd.add_argument("--scan", type=int, default=200000, help="read at most this many messages per queue")
    names_cmd.add_argument("queues", nargs="*")
    tasks_cmd = sub.add_parser("tasks", help="print each task's state and whether the broker holds it unacknowledged")
    tasks_cmd.add_argument("--celery-app", required=True)
    tasks_cmd.add_argument("ids", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "names":
        # One import of the app for both: the deploy asks this of every new release.
        print(json.dumps({"registered": client.registered(args.celery_app),
                          "transport": client.load_app(args.celery_app).connection_for_read().transport.driver_type,
                          "waiting": client.waiting_tasks(args.celery_app, args.queues, args.scan)}, sort_keys=True))
        return 0
    if args.command == "dead":
        print(json.dumps(client.dead_letters(args.celery_app, args.action, args.queues, args.limit,
                                             args.confirm_discard),
                         sort_keys=True))
        return 0
    if args.command == "tasks":
        print(json.dumps(client.task_states(args.celery_app, args.ids), sort_keys=True))
        return 0
    if args.command == "health":
        print(json.dumps(client.health_of(client.load_app(args.celery_app), args.timeout), sort_keys=True))
        return 0
    if args.command == "queue":
        print(own_smoke_queue() or "")
        return 0
    if args.command == "rq-jobs":
        print(json.dumps(rq_client.job_states(args.ids), sort_keys=True))
        return 0
    if args.command == "rq-stats":
        print(json.dumps(rq_client.queue_stats(args.queues), sort_keys=True))
        return 0
    if args.command == "rq-smoke":
        print(json.dumps(rq_client.smoke(args.queues, args.timeout), sort_keys=True))
        return 0
    if args.command == "stats":
        expect = int(os.environ.get(CONSUMERS_EXPECTED_ENV) or 0)
        print(json.dumps(client.queue_stats(args.celery_app, args.queues, args.timeout, expect), sort_keys=True))
        return 0
    print(json.dumps(client.smoke(args.celery_app, args.queues, args.timeout), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
