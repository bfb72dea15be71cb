"""Enqueue one long task without waiting: `python -m shopdemo.sleeper KEY SECONDS`; prints its task id."""

from __future__ import annotations

import sys

from shopdemo.celery import sleep


def main(argv=None) -> int:
    key, seconds = (sys.argv[1:] if argv is None else argv)[:2]
    print(sleep.delay(key, float(seconds)).id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
