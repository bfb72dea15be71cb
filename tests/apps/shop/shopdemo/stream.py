"""A stream of tasks, as producers send them during a deploy: `python -m shopdemo.stream PREFIX SECONDS [INTERVAL]`.

Enqueues shopdemo.record(PREFIX-<n>) every INTERVAL seconds for SECONDS, then waits for every result and prints
JSON: sent, answered, missing (keys with no answer), effects (keys whose effect exists exactly once), redelivered
(keys that ran more than once; their effect still happened once), builds (answers per build ID).
"""

from __future__ import annotations

import json
import os
import sys
import time

from shopdemo import store
from shopdemo.celery import record


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    prefix, seconds = args[0], float(args[1])
    interval = float(args[2]) if len(args) > 2 else 0.25
    sent = []
    end = time.monotonic() + seconds
    # SHOP_STREAM_STOP: a file whose appearance ends the stream early (a test stops it when its deploy is done).
    stop = os.environ.get("SHOP_STREAM_STOP")
    while time.monotonic() < end and not (stop and os.path.exists(stop)):
        key = f"{prefix}-{len(sent)}"
        sent.append((key, record.delay(key, key)))
        time.sleep(interval)
    builds: dict[str, int] = {}
    missing = []
    for key, result in sent:
        try:
            answer = result.get(timeout=180)
            builds[answer["build_id"]] = builds.get(answer["build_id"], 0) + 1
        except Exception:  # noqa: BLE001 (counted as missing)
            missing.append(key)
    db = store.client()
    keys = [key for key, dummy in sent]
    effects = sum(1 for key in keys if db.get(store.EFFECT.format(key=key)) == key)
    redelivered = [key for key in keys if int(db.get(store.RUNS.format(key=key)) or 0) > 1]
    print(json.dumps({"sent": len(sent), "answered": len(sent) - len(missing), "missing": missing,
                      "effects": effects, "redelivered": redelivered, "builds": builds}, sort_keys=True))
    return 0 if not missing else 1


if __name__ == "__main__":
    sys.exit(main())
