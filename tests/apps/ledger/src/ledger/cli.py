"""ledger-post ACCOUNT CENTS: enqueue one entry and print the worker's answer (a producer, as the web would be)."""

from __future__ import annotations

import sys


def post(argv: list[str] | None = None) -> int:
    import uuid  # pylint: disable=import-outside-toplevel

    import redis  # pylint: disable=import-outside-toplevel

    from ledger.worker import app, post_entry  # pylint: disable=import-outside-toplevel

    account, cents = (argv if argv is not None else sys.argv[1:])[:2]
    reply = f"ledger:posted:{uuid.uuid4().hex}"
    post_entry.delay(account, int(cents), reply)
    # No result backend: the worker pushes its answer onto the reply list.
    got = redis.Redis.from_url(app.conf.broker_url).blpop([reply], timeout=30)
    if got is None:
        print(f"no worker posted the entry within 30s (queue {app.conf.task_default_queue})", file=sys.stderr)
        return 1
    print(got[1].decode())
    return 0
