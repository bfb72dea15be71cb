"""Long tasks without waiting for them.

`python -m shopdemo.sleeper KEY SECONDS [COUNT]`: enqueue one long task (shopdemo.sleep), or COUNT of them keyed
KEY-0 .. KEY-<COUNT-1>; prints their task ids.
`python -m shopdemo.sleeper --runs KEY COUNT`: how many times each of those ran, as JSON: {"done": finished ones,
"runs": {times run: how many tasks}}.
"""

from __future__ import annotations

import collections
import json
import sys

from shopdemo import store
from shopdemo.celery import sleep


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[0] == "--runs":
        prefix, count = args[1], int(args[2])
        db = store.client()
        keys = [f"{prefix}-{i}" for i in range(count)]
        runs = db.mget([store.RUNS.format(key=k) for k in keys])
        done = db.mget([store.EFFECT.format(key=k) for k in keys])
        print(json.dumps({"done": sum(1 for d in done if d),
                          "runs": collections.Counter(str(int(r or 0)) for r in runs)}, sort_keys=True))
        return 0
    key, seconds = args[:2]
    if len(args) < 3:
        print(sleep.delay(key, float(seconds)).id)
        return 0
    for i in range(int(args[2])):
        print(sleep.delay(f"{key}-{i}", float(seconds)).id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
