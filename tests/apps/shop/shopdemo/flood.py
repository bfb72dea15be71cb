"""A backlog, as after an outage: `python -m shopdemo.flood PREFIX COUNT [POISON_AT]`.

Sends COUNT shopdemo.record tasks (keys PREFIX-<n>) at once, and with POISON_AT a shopdemo.poison (key
PREFIX-poison) after that many; waits for every record to finish and prints JSON: sent, done, missing (keys with no
result), runs (how many keys ran once, twice...: exactly once is {"1": COUNT}), poison_runs, poison_id, poison_state
(once it stopped being redelivered), first_done,
last_done (UNIX times from the result backend) and rate (finished tasks per second over the drain).
"""

from __future__ import annotations

import json
import sys
import time

from shopdemo import store
from shopdemo.celery import poison, record


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    prefix, count = args[0], int(args[1])
    poison_at = int(args[2]) if len(args) > 2 else None
    sent, poison_id = [], None
    for n in range(count):
        if n == poison_at:
            poison_id = poison.delay(f"{prefix}-poison").id
        sent.append((f"{prefix}-{n}", record.delay(f"{prefix}-{n}", "v")))
    deadline = time.monotonic() + 60 + count  # generous: the drain itself is what is measured
    missing, done = [], []
    for key, result in sent:
        try:
            result.get(timeout=max(1.0, deadline - time.monotonic()))
            done.append(result.date_done.timestamp())
        except Exception:  # noqa: BLE001 (counted as missing)
            missing.append(key)
    poison_state = None
    if poison_id:
        # Its last delivery ends in the dead-letter queue, which marks it failed: wait for that, not just the others.
        result = poison.AsyncResult(poison_id)
        try:
            result.get(timeout=max(1.0, deadline - time.monotonic()), propagate=False)
        except Exception:  # noqa: BLE001 (reported as its state)
            pass
        poison_state = result.state
    db = store.client()
    runs: dict[str, int] = {}
    for key, dummy in sent:
        n = str(int(db.get(store.RUNS.format(key=key)) or 0))
        runs[n] = runs.get(n, 0) + 1
    done.sort()
    span = done[-1] - done[0] if len(done) > 1 else 0
    print(json.dumps({"sent": count, "done": len(done), "missing": missing[:20], "runs": runs,
                      "poison_id": poison_id, "poison_state": poison_state,
                      "poison_runs": int(db.get(store.RUNS.format(key=f"{prefix}-poison")) or 0),
                      "first_done": done[0] if done else None, "last_done": done[-1] if done else None,
                      "rate": round((len(done) - 1) / span, 2) if span else None}, sort_keys=True))
    return 0 if not missing else 1


if __name__ == "__main__":
    sys.exit(main())
