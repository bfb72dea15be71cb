"""Helpers for the worker scenario: hosts over podman, systemd properties, and re-running the role."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import testinfra.utils.ansible_runner
import yaml

SCENARIO_DIR = Path(__file__).resolve().parent.parent


def pytest_generate_tests(metafunc):
    # Talk to the containers through podman directly; the default ansible backend costs one
    # ansible-playbook round trip per command (10x slower).
    inventory = os.environ.get("MOLECULE_INVENTORY_FILE")
    if inventory and not hasattr(metafunc.module, "testinfra_hosts"):
        hosts = testinfra.utils.ansible_runner.AnsibleRunner(inventory).get_hosts("all")
        metafunc.module.testinfra_hosts = [f"podman://{h}" for h in hosts]


def pytest_itemcollected(item):
    # One xdist worker per test host (--dist loadgroup): tests on one host run in order, the hosts
    # side by side. Marked as each item is collected, before xdist reads the groups.
    spec = getattr(item, "callspec", None)
    if spec and "_testinfra_host" in spec.params:
        item.add_marker(pytest.mark.xdist_group(spec.params["_testinfra_host"].backend.get_hostname()))


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
    name = host.backend.get_hostname()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(overrides, fh)
    try:
        return subprocess.run(
            [
                "ansible-playbook",
                "-i",
                os.environ["MOLECULE_INVENTORY_FILE"],
                "--limit",
                name,
                "-e",
                f"@{fh.name}",
                *args,
                str(SCENARIO_DIR / "converge.yml"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        os.unlink(fh.name)


@pytest.fixture
def restore(host):
    """Converge the declaration again after the test, so later tests see the scenario's state."""
    yield
    result = run_role(host)
    assert result.returncode == 0, result.stdout[-3000:]
