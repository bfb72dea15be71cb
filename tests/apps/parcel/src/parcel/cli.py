"""parcel-send: enqueue parcels to weigh (the Redis URL in RQ_REDIS_URL, as `rq worker` reads it).

    parcel-send PREFIX COUNT [--seconds S]           COUNT jobs, ids PREFIX-1..COUNT; prints {"sent": COUNT}
    parcel-send PREFIX COUNT --until KEY             COUNT jobs that run until the Redis key KEY exists
    parcel-send PREFIX --stream STOPFILE [--every T]  one job every T seconds until STOPFILE exists, then waits until
                                                      every job ran; prints what was sent, weighed, missing, failed
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time

from redis import Redis
from rq import Queue
from rq.registry import FailedJobRegistry

from parcel.jobs import WEIGHED

QUEUE = "parcel.scales"


def send(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="parcel-send")
    parser.add_argument("prefix")
    parser.add_argument("count", type=int, nargs="?", default=0)
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--until", metavar="KEY", help="the jobs run until this Redis key exists")
    parser.add_argument("--stream", metavar="STOPFILE")
    parser.add_argument("--every", type=float, default=0.2)
    parser.add_argument("--wait", type=float, default=300.0, help="how long a stream waits for its last jobs")
    args = parser.parse_args(argv)
    conn = Redis.from_url(os.environ["RQ_REDIS_URL"])
    queue = Queue(QUEUE, connection=conn)

    def one(n: int) -> str:
        parcel = f"{args.prefix}-{n}"
        queue.enqueue("parcel.jobs.weigh", parcel, args.seconds, args.until, job_id=parcel, result_ttl=3600,
                      failure_ttl=86400)
        return parcel

    if not args.stream:
        for n in range(1, args.count + 1):
            one(n)
        print(json.dumps({"sent": args.count}))
        return 0
    sent = []
    while not os.path.exists(args.stream):
        sent.append(one(len(sent) + 1))
        time.sleep(args.every)
    deadline = time.monotonic() + args.wait
    while True:
        weighed = dict(zip(sent, conn.hmget(WEIGHED, sent)))
        missing = [p for p, v in weighed.items() if v is None]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(1)
    builds = collections.Counter(json.loads(v)["build"] for v in weighed.values() if v)
    failed = [j for j in FailedJobRegistry(queue=queue).get_job_ids() if j.startswith(f"{args.prefix}-")]
    print(json.dumps({"sent": len(sent), "weighed": len(sent) - len(missing), "missing": missing, "failed": failed,
                      "builds": dict(builds)}, sort_keys=True))
    return 0
