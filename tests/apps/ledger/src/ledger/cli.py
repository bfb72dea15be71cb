"""ledger-post ACCOUNT CENTS: enqueue one entry and print the worker's answer (a producer, as the web would be)."""

from __future__ import annotations

import json
import sys


def post(argv: list[str] | None = None) -> int:
    from ledger.worker import post_entry  # pylint: disable=import-outside-toplevel

    account, cents = (argv if argv is not None else sys.argv[1:])[:2]
    print(json.dumps(post_entry.delay(account, int(cents)).get(timeout=30)))
    return 0
