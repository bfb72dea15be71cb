"""Configuration from the environment and systemd credentials; secrets never come from the command line."""

from __future__ import annotations

import os
from pathlib import Path

from shopdemo import _build

BUILD_ID = _build.BUILD_ID
SCHEMA_TARGET = _build.SCHEMA_TARGET


def secret(name: str) -> str:
    """A secret by name: $CREDENTIALS_DIRECTORY/<name> (LoadCredential=) first, then the environment variable
    <name> (EnvironmentFile=). Missing is an error that names the secret, never a value."""
    directory = os.environ.get("CREDENTIALS_DIRECTORY")
    if directory and (Path(directory) / name).is_file():
        return (Path(directory) / name).read_text(encoding="utf-8")
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"secret {name} is missing: no credential {name} and no environment variable {name}")
    return value


def broker_url() -> str:
    return secret("BROKER_URL")


def result_url() -> str:
    """Where results and the app's own records live: RESULT_URL (a Redis URL) when the broker is RabbitMQ, else the
    broker's Redis."""
    directory = os.environ.get("CREDENTIALS_DIRECTORY")
    if os.environ.get("RESULT_URL") or (directory and (Path(directory) / "RESULT_URL").is_file()):
        return secret("RESULT_URL")
    return broker_url()


def visibility_timeout() -> int:
    # Short in tests: a task lost with its worker comes back after this many seconds.
    return int(os.environ.get("SHOP_VISIBILITY_TIMEOUT", "30"))
