"""The jobs `rq worker parcel.scales` runs: each weighs a parcel for a while and records where it ran."""

from __future__ import annotations

import json
import os
import socket
import time

from rq import get_current_job

WEIGHED = "parcel:weighed"


def weigh(parcel_id: str, seconds: float = 0.0, until: str | None = None) -> dict:
    """Take `seconds` (or, with `until`, run until that Redis key exists, at most 10 minutes: a job a test ends when
    it is done with it, instead of racing its length), then record which build, unit and host weighed `parcel_id`
    (HSET parcel:weighed)."""
    started = time.time()
    if until:
        conn = get_current_job().connection
        while not conn.exists(until) and time.time() - started < 600:
            time.sleep(0.1)
    else:
        time.sleep(seconds)
    done = {"build": os.environ.get("STURDY_BUILD_ID"), "host": socket.gethostname(),
            "unit": "{}@{}".format(os.environ.get("STURDY_PROCESS"), os.environ.get("STURDY_INSTANCE")),
            "started": started, "ended": time.time()}
    get_current_job().connection.hset(WEIGHED, parcel_id, json.dumps(done))
    return done
