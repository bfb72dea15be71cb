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


def visibility_timeout() -> int:
    # Short in tests: a task lost with its worker comes back after this many seconds.
    return int(os.environ.get("SHOP_VISIBILITY_TIMEOUT", "30"))
