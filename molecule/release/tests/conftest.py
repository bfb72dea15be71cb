"""Helpers for the release scenario: the app hosts over podman, and re-running the scenario's playbooks."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from testhosts import group_by_host, podman_hosts  # noqa: E402

SCENARIO_DIR = Path(__file__).resolve().parent.parent
EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
DIST = EPHEMERAL / "dist"
LOG = EPHEMERAL / "ansible.log"
BUILDS = [f"2026.11.29-{n}" for n in range(1, 5)]


def pytest_generate_tests(metafunc):
    podman_hosts(metafunc, "apps")


def pytest_itemcollected(item):
    group_by_host(item)


def declaration() -> dict:
    return yaml.safe_load((SCENARIO_DIR / "vars" / "main.yml").read_text())


def secret_values() -> list[str]:
    decl = declaration()
    return [decl["shop_redis_password"], decl["shop_api_token"]]


def digest(text: str) -> str:
    """Compare secrets by digest, so a failing assertion never prints one."""
    return hashlib.sha256(text.encode()).hexdigest()


def artifact(build: str, subdir: str = "") -> str:
    return str(DIST / subdir / f"shop-{build}.tar.gz")


def play(host, playbook: str = "converge.yml", *args: str, **extra) -> subprocess.CompletedProcess:
    """Run one of the scenario's playbooks on this host alone; `extra` become extra vars (they win)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(extra, fh)
    try:
        return subprocess.run(
            ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], "--limit",
             host.backend.get_hostname(), "-e", f"@{fh.name}", *args, str(SCENARIO_DIR / playbook)],
            capture_output=True, text=True, timeout=600, check=False,  # Mitogen, ansible.log: molecule.yml's env
        )
    finally:
        os.unlink(fh.name)


def deploy(host, build: str, *args: str, **extra) -> subprocess.CompletedProcess:
    result = play(host, "converge.yml", *args, sturdy_build_id=build, sturdy_artifact=artifact(build), **extra)
    assert result.returncode == 0, result.stdout[-4000:]
    return result


def said(result: subprocess.CompletedProcess) -> str:
    """The play's output with whitespace collapsed: the yaml callback wraps long messages."""
    return " ".join((result.stdout + result.stderr).split())


def recap(result: subprocess.CompletedProcess) -> dict[str, int]:
    line = next(line for line in result.stdout.splitlines() if " : ok=" in line)
    return {k: int(v) for k, v in (pair.split("=") for pair in line.split(" : ", 1)[1].split())}


def link(host, name: str) -> str:
    return host.check_output("readlink /srv/shop/%s || true", name)


def releases(host) -> list[str]:
    return host.check_output("ls /srv/shop/releases").split()


def task(host, key: str, timeout: int = 60) -> dict:
    """Enqueue a task as a producer would and return the worker's answer (build ID, host, pid)."""
    out = host.run("shop-task %s value-%s %s", key, key, str(timeout))
    assert out.rc == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def health(host) -> dict:
    return json.loads(host.check_output(
        "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:8000/health\", "
        "timeout=5).read().decode())'"))


def main_pid(host, unit: str) -> str:
    return host.check_output("systemctl show -P MainPID %s", unit)


def invocations(host) -> dict[str, str]:
    out = host.check_output("systemctl show -p Id,InvocationID 'shop-*@*.service'")
    blocks = [dict(line.split("=", 1) for line in b.splitlines() if "=" in line) for b in out.split("\n\n")]
    return {b["Id"]: b["InvocationID"] for b in blocks if b.get("Id")}


def snapshot(host) -> str:
    """What a refused deploy must leave alone: releases, links, secrets, units and the running processes."""
    return host.check_output(
        "find /srv/shop /etc/shop /etc/systemd/system -printf '%p %y %m %u %l\\n' | sort"
        " && find /srv/shop/releases -maxdepth 2 -name RELEASE.json -exec md5sum {} + | sort"
        " && find /etc/shop -type f -exec md5sum {} + | sort"
        " && systemctl show -p Id,InvocationID,ActiveState 'shop-*@*.service'"
    )
