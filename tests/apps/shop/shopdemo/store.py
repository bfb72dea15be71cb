"""Redis keys the app's effects and schema live under."""

from __future__ import annotations

import redis

from shopdemo.settings import result_url

EFFECT = "shop:effect:{key}"
RUNS = "shop:runs:{key}"
EFFECTS_TOTAL = "shop:effects"
SCHEMA = "shop:schema_version"


def client() -> redis.Redis:
    return redis.Redis.from_url(result_url(), decode_responses=True)
