"""What every scenario's conftest.py needs: its hosts over podman, and one xdist worker per host."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import testinfra
import testinfra.utils.ansible_runner

ROOT = Path(__file__).resolve().parents[2]
# What a user reads: the README, then the pages of docs/ it points to.
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def podman_hosts(metafunc, group: str = "all") -> None:
    """Talk to the containers through podman directly; testinfra's ansible backend costs one ansible-playbook
    round trip per command (10x slower)."""
    inventory = os.environ.get("MOLECULE_INVENTORY_FILE")
    if inventory and not hasattr(metafunc.module, "testinfra_hosts"):
        hosts = testinfra.utils.ansible_runner.AnsibleRunner(inventory).get_hosts(group)
        metafunc.module.testinfra_hosts = [f"podman://{h}" for h in hosts]


def group_by_host(item) -> None:
    """One xdist worker per test host (--dist loadgroup): a host's tests run in order, the hosts side by side.
    Marked as each item is collected, before xdist reads the groups."""
    spec = getattr(item, "callspec", None)
    if spec and "_testinfra_host" in spec.params:
        item.add_marker(pytest.mark.xdist_group(spec.params["_testinfra_host"].backend.get_hostname()))


def on_mitogen(env: dict[str, str]) -> dict[str, str]:
    """`env` for an ansible-playbook run on Mitogen (sturdy_mitogen_linear), which keeps one Python per host across
    tasks and takes the inventory's connection over (mitogen_podman, mitogen_ssh): what the deploy, release, rabbitmq
    and rq scenarios set in their molecule.yml, for tools/bench.py. The worker and ownapp scenarios and the README
    commands stay on the stock strategy."""
    return dict(env, ANSIBLE_STRATEGY="sturdy_mitogen_linear", ANSIBLE_STRATEGY_PLUGINS=str(Path(__file__).parent / "strategy"))


def ssh_key(where: Path, names: list[str]) -> Path:
    """An SSH key of its own in `where` (made once), authorized for root on the hosts `names` (the test images run
    sshd): for tools/bench.py's hosts. A scenario's prepare does this for its hosts (molecule/_shared/authorize_key.yml,
    the key EPHEMERAL/ssh/id_ed25519)."""
    key = where / "id_ed25519"
    if not key.exists():
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sturdy-tests", "-f", str(key)],
                       check=True)
    pub = key.with_suffix(".pub").read_text()
    for name in names:
        subprocess.run(["podman", "exec", "-i", name, "sh", "-c",
                        "install -d -m 0700 /root/.ssh && cat > /root/.ssh/authorized_keys"],
                       input=pub, text=True, check=True)
    return key


def address(name: str) -> str:
    """The host's address on the scenario's network, which the controller reaches (rootful podman, a bridge)."""
    return subprocess.run(["podman", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                           name], capture_output=True, text=True, check=True).stdout.strip()


# How the tests reach hosts over SSH as a user's ansible.cfg would: pipelining and a persistent master connection.
SSH_CFG = ("[connection]\npipelining = True\n[ssh_connection]\n"
           "ssh_args = -o ControlMaster=auto -o ControlPersist=60s -o StrictHostKeyChecking=no"
           " -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR\n")


def host(name: str):
    return testinfra.get_host(f"podman://{name}")


def said(result: subprocess.CompletedProcess) -> str:
    """The play's output with whitespace collapsed: the yaml callback wraps long messages."""
    return " ".join((result.stdout + result.stderr).split())


def recaps(result: subprocess.CompletedProcess) -> dict[str, dict[str, int]]:
    found = {}
    for line in result.stdout.splitlines():
        if " : ok=" in line:
            name, rest = line.split(" : ", 1)
            found[name.strip()] = {k: int(v) for k, v in (pair.split("=") for pair in rest.split())}
    return found


def wait_for(what: str, probe, timeout: float = 90):
    """probe() until it returns something true; fail naming `what` and the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        time.sleep(2)


def while_tasks_flow(producer: str, prefix: str, action):
    """Run action() while `producer` (a container with shop-task) sends a stream of tasks, from 3 s before it to 3 s
    after it, however long it takes; (action's result, the stream's JSON answer). The stream lost no task, and each
    ran to its effect."""
    stream = subprocess.Popen(["podman", "exec", "-e", f"SHOP_STREAM_STOP=/tmp/stop-{prefix}", producer,
                               "/usr/local/sbin/shop-task", "--stream", prefix, "600", "0.25"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    result = action()
    time.sleep(3)
    host(producer).check_output(f"touch /tmp/stop-{prefix}")
    out, err = stream.communicate(timeout=400)
    assert result.returncode == 0, said(result)[-3000:]
    flow = json.loads(out.strip().splitlines()[-1])
    assert flow["sent"] > 100 and flow["missing"] == [], (flow, err[-2000:])
    assert flow["answered"] == flow["sent"] and flow["effects"] == flow["sent"]
    return result, flow


# GET <url> in a loop until <stop> exists, one JSON line per request: [status, build_id, pid] or ["error", why].
_WEB_CLIENT = r"""
import json, os, sys, time, urllib.error, urllib.request
url, stop = sys.argv[1:3]
while not os.path.exists(stop):
    try:
        with urllib.request.urlopen(url, timeout=15) as answer:
            body = json.loads(answer.read())
            line = [answer.status, body["build_id"], body.get("pid")]
    except urllib.error.HTTPError as exc:
        line = [exc.code, exc.reason]
    except Exception as exc:  # a refused or reset connection, a timeout: what must never happen
        line = ["error", repr(exc)]
    print(json.dumps(line), flush=True)
    time.sleep(0.02)
"""


def while_requests_flow(web: str, url: str, action):
    """Run action() while a client on `web` fires GET `url` back to back (one at a time, 20 ms apart), from 2 s before
    it to 2 s after it; (action's result, the answers as [status, build, pid] or ["error", why], in order)."""
    stop = f"/tmp/stop-requests-{time.monotonic_ns()}"
    # The answers go to files, never to a pipe nobody reads while action() runs: a full pipe would stop the client at
    # its first few thousand answers, all from the old build, and the test would blame the deploy.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        client = subprocess.Popen(["podman", "exec", web, "python3", "-c", _WEB_CLIENT, url, stop],
                                  stdout=out, stderr=err, text=True)
        time.sleep(2)
        try:
            result = action()
            time.sleep(2)
        finally:
            host(web).check_output(f"touch {stop}")
            client.wait(timeout=60)
        out.seek(0)
        err.seek(0)
        answers = [json.loads(line) for line in out.read().splitlines() if line.strip()]
        assert answers, err.read()[-2000:]
    return result, answers


def assert_served_in_turn(answers: list[list], old: str, new: str, web: str = "") -> None:
    """The answers (while_requests_flow's, from host `web`) are all 200 and name build `old`, then build `new`, each at
    least once, no other, never `old` again after `new`; else the failure shows them in runs (turns())."""
    refused = [a for a in answers if a[0] != 200]
    assert refused == [], (web, refused[:5])
    builds = [a[1] for a in answers]
    assert set(builds) == {old, new} and builds == sorted(builds, key=[old, new].index), f"{web}: {turns(answers)}"


def turns(answers: list[list]) -> str:
    """The answers in runs, for a failed assertion: status and build, how many in a row and the pids that answered,
    as "200 2026.12.03-1 x140 (pids 812 813), 200 2026.12.03-2 x61 (pids 990 991)"."""
    runs: list[list] = []
    for status, why, *pid in answers:
        if not (runs and runs[-1][0] == (status, why)):
            runs.append([(status, why), 0, set()])
        runs[-1][1] += 1
        runs[-1][2].update(pid)
    return ", ".join(f"{status} {why} x{count}" + (f" (pids {' '.join(map(str, sorted(pids)))})" if pids else "")
                     for (status, why), count, pids in runs)


def unit_states(names: list[str], units: list[str]) -> dict[tuple[str, str], tuple[bool, str]]:
    """(running, NRestarts) of each of `units` on each host of `names`."""
    return {(name, unit): (host(name).service(unit).is_running, host(name).service(unit).systemd_properties["NRestarts"])
            for name in names for unit in units}


def flood(producer: str) -> dict:
    """A backlog of 2,000 tasks with a poison task (it SIGKILLs the pool process that runs it) sent after the first
    1,000, from `producer` (shop-task --flood); its JSON answer. Every task ran exactly once, at the queue's rate limit
    of 20/s: at most the limit (+10 % for the measurement); the lower bound catches a wrong split (each instance given
    half its share drains at 10/s), and is no speed test: a CI machine short of CPU drained at 17.7/s."""
    run = host(producer).run("/usr/local/sbin/shop-task --flood flood 2000 1000")
    assert run.stdout.strip(), run.stderr[-2000:]
    answer = json.loads(run.stdout.splitlines()[-1])
    assert (answer["done"], answer["missing"], answer["runs"]) == (2000, [], {"1": 2000}), answer
    assert 14 <= answer["rate"] <= 22, answer
    return answer


def readme_command(playbook: str, build: str = "", having: str = "") -> list[str]:
    """The first command for sturdy.workers.<playbook> with `having` in it that the README (then docs/) shows, as
    written (a build ID in it replaced by `build`)."""
    for page in USER_DOCS:
        for line in page.read_text().splitlines():
            if line.startswith(f"ansible-playbook sturdy.workers.{playbook} ") and having in line:
                argv = shlex.split(line, comments=True)
                return [f"sturdy_build_id={build}" if build and a.startswith("sturdy_build_id=") else a for a in argv]
    raise AssertionError(f"neither README.md nor docs/ shows an ansible-playbook sturdy.workers.{playbook} command "
                         f"{having}")
