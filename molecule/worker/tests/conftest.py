"""Helpers for the worker scenario: hosts over podman, systemd properties, and re-running the role."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from testhosts import group_by_host, podman_hosts  # noqa: E402

SCENARIO_DIR = Path(__file__).resolve().parent.parent


def pytest_generate_tests(metafunc):
    podman_hosts(metafunc, "all")


def pytest_itemcollected(item):
    group_by_host(item)


def declaration() -> dict:
    """The variables converge.yml applies (a fresh copy each call)."""
    return yaml.safe_load((SCENARIO_DIR / "vars" / "main.yml").read_text())


def process(decl: dict, name: str) -> dict:
    return next(p for p in decl["sturdy_processes"] if p["name"] == name)


def show(host, unit: str, *props: str) -> dict[str, str]:
    out = host.check_output("systemctl show --property=%s %s", ",".join(props), unit)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def systemd_version(host) -> int:
    return int(host.check_output("systemctl --version").split()[1])


def wait_for(predicate, timeout: float, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def snapshot(host) -> str:
    """What the role may change: unit files (names, modes, links, contents), accounts, and the app's
    units (state, enablement, and the InvocationID that changes on every start)."""
    return host.check_output(
        "cd /etc/systemd/system && find . -printf '%p %y %m %l\\n' | sort"
        " && find . -type f -exec md5sum {} + | sort && getent passwd && getent group"
        " && systemctl list-units --all --plain --no-legend 'demo*'"
        " && systemctl show --property=Id,InvocationID,UnitFileState 'demo*'"
    )


def run_role(host, *args: str, **overrides) -> subprocess.CompletedProcess:
    """Run converge.yml on this host alone with some variables replaced (extra vars win); `args` are
    more ansible-playbook options, such as --check --diff."""
    return run_playbook(str(SCENARIO_DIR / "converge.yml"), *args, "--limit", host.backend.get_hostname(), **overrides)


def run_playbook(playbook: str, *args: str, env: dict | None = None, **overrides) -> subprocess.CompletedProcess:
    """Run a playbook against the scenario's inventory with some variables replaced (extra vars win), and `env` added
    to the environment."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(overrides, fh)
    try:
        return subprocess.run(
            [
                "ansible-playbook",
                "-i",
                os.environ["MOLECULE_INVENTORY_FILE"],
                "-e",
                f"@{fh.name}",
                *args,
                playbook,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**os.environ, **(env or {})},
        )
    finally:
        os.unlink(fh.name)


@pytest.fixture
def restore(host):
    """Converge the declaration again after the test, so later tests see the scenario's state."""
    yield
    result = run_role(host)
    assert result.returncode == 0, result.stdout[-3000:]
