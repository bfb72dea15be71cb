"""The migration command: moves the schema version forward to this build's target; re-runnable.

Each run that succeeds appends "<build> <host> <unix time> <from>-><to>" to /var/lib/shop/migrations.log, the
directory the units may write (it exists for the migration on a first deploy too): the tests read there on which
host, and when, it ran.

SHOP_MIGRATION_FAIL=1 makes it fail on purpose (after printing what it was doing, and its broker URL and password, as
careless code does), for the tests that a failed migration stops the deploy and that its output is masked.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from urllib.parse import urlsplit

from shopdemo import store
from shopdemo.settings import BUILD_ID, SCHEMA_TARGET


def main() -> int:
    db = store.client()
    current = int(db.get(store.SCHEMA) or 0)
    print(f"migrate: build {BUILD_ID}, schema {current} -> {SCHEMA_TARGET}")
    if os.environ.get("SHOP_MIGRATION_FAIL") == "1":
        # Careless code prints its secrets: the whole URL, and the password inside another URL.
        password = urlsplit(os.environ.get("BROKER_URL", "")).password
        print(f"migrate: connected to {os.environ.get('BROKER_URL')}")
        print(f"migrate: replica redis://:{password}@replica:6379/1 is not reachable", file=sys.stderr)
        print("migrate: ERROR: migration failed on purpose (SHOP_MIGRATION_FAIL=1)", file=sys.stderr)
        return 1
    for version in range(current + 1, SCHEMA_TARGET + 1):
        db.set(store.SCHEMA, version)
        print(f"migrate: applied {version}")
    if current >= SCHEMA_TARGET:
        print("migrate: nothing to do")
    with open("/var/lib/shop/migrations.log", "a", encoding="utf-8") as log:
        log.write(f"{BUILD_ID} {socket.gethostname()} {time.time():.3f} {current}->{SCHEMA_TARGET}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
