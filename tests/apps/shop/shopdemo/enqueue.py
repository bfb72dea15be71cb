"""Enqueue shopdemo.record like a producer would and wait for the result: `python -m shopdemo.enqueue KEY VALUE`.

Prints the worker's answer as JSON (key, build ID, host, pid); exits 1 when no worker answers in time.
"""

from __future__ import annotations

import json
import sys

from shopdemo.celery import record


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    key, value = args[0], args[1]
    timeout = float(args[2]) if len(args) > 2 else 60.0
    try:
        answer = record.delay(key, value).get(timeout=timeout)
    except Exception as exc:  # noqa: BLE001 (report any failure as one line)
        print(f"enqueue: no answer for {key} within {timeout:.0f}s: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(answer, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
