"""Redis keys the app's effects and schema live under."""

from __future__ import annotations

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from shopdemo.settings import result_url

EFFECT = "shop:effect:{key}"
RUNS = "shop:runs:{key}"
EFFECTS_TOTAL = "shop:effects"
SCHEMA = "shop:schema_version"


def client() -> redis.Redis:
    # The store is the broker's Redis: a task's write waits out a short outage (about a minute of retries) instead of
    # failing the task after it started, whose message is then acknowledged as failed and its effect never made.
    return redis.Redis.from_url(result_url(), decode_responses=True,
                                retry=Retry(ExponentialBackoff(cap=4, base=0.5), 20))
