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
    # failing the task after it started, whose message is then acknowledged as failed and its effect never made. It
    # tries again at least every second, so a task waiting on it resumes as soon as Redis is back, well within its
    # time limit (SHOP_TASK_TIME_LIMIT, 25 s) after an outage of under 20 s.
    return redis.Redis.from_url(result_url(), decode_responses=True,
                                retry=Retry(ExponentialBackoff(cap=1, base=0.25), 60))
