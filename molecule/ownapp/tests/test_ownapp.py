"""The README's "Deploy your own app", run as written on a user's own app (the ledger app, not the demo): build,
deploy, status, a second build, rollback; on bookworm and trixie, Redis on its own host. The tests run in order."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from conftest import (HOSTS, WALK, command, host, lay_out, live_release, run, said, assert_served_in_turn,
                      vault, while_requests_flow)

B1, B2 = "2026.12.03-1", "2026.12.03-2"
UNITS = ["ledger-worker@1.service", "ledger-worker@2.service", "ledger-sweeper@1.service"]
BEAT = "ledger-beat@1.service"
WEB = "ledger-web@1.service"
# The web's readiness URL in the README's walkthrough (gunicorn on the socket systemd holds).
HEALTH = "http://127.0.0.1:8080/health"
SECRET = "s3cret"


def artifact(build: str) -> Path:
    return Path(f"/var/tmp/builds/ledger-{build}.tar.gz")


def build_of(name: str, unit: str) -> str:
    h = host(name)
    return h.check_output(f"readlink /proc/{h.check_output(f'systemctl show -P MainPID {unit}')}/cwd").rsplit("/", 1)[-1]


def in_release(name: str, argv: str) -> str:
    """`argv` in the current release on host `name`, with the broker URL of the README's vault (the hosts name the
    broker redis.internal)."""
    url = shlex.quote(vault()["vault_ledger_broker_url"])
    return host(name).check_output(f"cd /srv/ledger/current && LEDGER_BROKER_URL={url} {argv}")


def succeeded(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, said(result)[-3000:]
    assert SECRET not in result.stdout + result.stderr


def beat_hosts() -> list[str]:
    """The hosts whose beat (the singleton) is active."""
    return [c for c in HOSTS.values() if host(c).run(f"systemctl is-active --quiet {BEAT}").rc == 0]


def inventory(*names: str) -> None:
    """deploy/inventory.yml as the user edits it: these hosts, in this order."""
    (WALK / "deploy" / "inventory.yml").write_text(
        "all:\n  children:\n    workers:\n      hosts:\n" + "".join(f"        {n}: {{}}\n" for n in names))


def test_build_1_is_built_deployed_and_each_instance_is_its_own_celery_node():
    lay_out()
    for build in (B1, B2):
        for path in (artifact(build), Path(f"{artifact(build)}.sha256")):
            path.unlink(missing_ok=True)
    built = run(command("build", B1))
    succeeded(built)
    assert f"ledger-{B1}.tar.gz" in said(built) and "ledger-app==2.3.0" in said(built), said(built)[-2000:]
    assert artifact(B1).is_file() and Path(f"{artifact(B1)}.sha256").read_text().endswith(f"ledger-{B1}.tar.gz\n")
    succeeded(run(command("deploy", B1)))
    report = json.loads((WALK / "deploy" / "deploy-report-ledger.json").read_text())
    assert (report["result"], report["build_id"]) == ("success", B1), report["message"]
    for name, container in HOSTS.items():
        assert live_release(container) == B1
        for unit in UNITS:
            assert report["hosts"][name]["instances"][unit]["smoke_build"] == B1
            assert build_of(container, unit) == B1
    # Two instances per host, four Celery nodes: no node name is shared (Celery warns and mixes up replies then).
    ping = json.loads(in_release("ownapp-bookworm", "venv/bin/celery -A ledger.worker inspect ping --json --timeout 5"))
    assert sorted(ping) == sorted(f"worker{n}@{c}" for c in HOSTS.values() for n in (1, 2)), ping
    # Beat on the first host of the inventory only, and its ticks reach the workers.
    assert beat_hosts() == ["ownapp-bookworm"]
    assert build_of("ownapp-bookworm", BEAT) == B1
    ticks = in_release("ownapp-trixie", "venv/bin/python -c 'import ledger.worker as w; print(w.tick())'")
    assert int(ticks.splitlines()[-1]) > 1, ticks
    # gunicorn serves on the socket systemd holds for it, on both platforms, from build 1.
    for container in HOSTS.values():
        assert host(container).check_output("systemctl show -P Listen ledger-web@1.socket") == "127.0.0.1:8080 (Stream)"
        assert build_of(container, WEB) == B1
        assert json.loads(host(container).check_output(
            f"python3 -c \"import urllib.request as u; print(u.urlopen('{HEALTH}').read().decode())\""))["build_id"] == B1
    # The sweeper is not Celery: its own smoke command proved each instance and its list.
    for name in HOSTS:
        assert report["hosts"][name]["instances"]["ledger-sweeper@1.service"]["smoke_build"] == B1
    swept = json.loads(in_release("ownapp-trixie", "bin/ledger-sweep acct-9").splitlines()[-1])
    assert swept["account"] == "acct-9" and swept["build_id"] == B1 and swept["unit"] == "ledger-sweeper@1.service"
    # The project's console script, as the builder's launcher in bin/, posts an entry that a worker runs.
    answer = json.loads(in_release("ownapp-trixie", "bin/ledger-post acct-7 250").splitlines()[-1])
    assert answer["account"] == "acct-7" and answer["cents"] == 250 and answer["host"] in HOSTS.values(), answer


def test_status_shows_every_instance_on_build_1():
    result = run(command("status"))
    succeeded(result)
    rows = [line.strip(' ",').split()[:4] for line in result.stdout.splitlines() if ".service" in line]
    for name in HOSTS:
        for unit in UNITS:
            assert [name, unit, "active", B1] in rows, result.stdout[-3000:]
    assert "OK, no problems" in result.stdout
    # Beat shows on the host that runs it only.
    assert [r[0] for r in rows if r[1] == BEAT] == ["app1.example.com"], rows


def test_build_2_deploys_and_the_rollback_brings_every_instance_back_to_build_1():
    succeeded(run(command("build", B2)))
    # A client on each host firing requests at gunicorn through the deploy and the rollback: every one answered 200,
    # by the old build until its restart and by the new one after it, none refused.
    (deployed, trixie), bookworm = while_requests_flow("ownapp-bookworm", HEALTH, lambda: while_requests_flow(
        "ownapp-trixie", HEALTH, lambda: run(command("deploy", B2))))
    succeeded(deployed)
    assert_served_in_turn(bookworm, B1, B2, "ownapp-bookworm")
    assert_served_in_turn(trixie, B1, B2, "ownapp-trixie")
    # Beat stays where it runs: nothing moved, nothing said.
    assert "now run on" not in deployed.stdout, deployed.stdout[-3000:]
    assert {live_release(c) for c in HOSTS.values()} == {B2}
    assert {build_of(c, u) for c in HOSTS.values() for u in [*UNITS, WEB]} == {B2}
    (rolled, trixie), bookworm = while_requests_flow("ownapp-bookworm", HEALTH, lambda: while_requests_flow(
        "ownapp-trixie", HEALTH, lambda: run(command("rollback"))))
    succeeded(rolled)
    assert_served_in_turn(bookworm, B2, B1, "ownapp-bookworm")
    assert_served_in_turn(trixie, B2, B1, "ownapp-trixie")
    assert {live_release(c) for c in HOSTS.values()} == {B1}
    assert {build_of(c, u) for c in HOSTS.values() for u in [*UNITS, WEB]} == {B1}
    answer = json.loads(in_release("ownapp-bookworm", "bin/ledger-post acct-8 1").splitlines()[-1])
    assert answer["cents"] == 1
    # One beat through both deploys and the rollback, on build 1 again.
    assert beat_hosts() == ["ownapp-bookworm"] and build_of("ownapp-bookworm", BEAT) == B1


def test_the_broker_password_is_in_no_log_unit_or_systemctl_show():
    log = (WALK.parent / "ansible.log").read_text(errors="replace")
    assert "ledger" in log and SECRET not in log
    for container in HOSTS.values():
        h = host(container)
        shown = h.check_output("systemctl cat 'ledger-*' ; systemctl show 'ledger-*'")
        assert "ledger-worker@.service" in shown and SECRET not in shown


def test_beat_stays_one_under_a_limit_moves_with_the_inventory_and_survives_its_host_leaving():
    # A deploy limited to app2 leaves beat where it is: app2 is not its host, whatever the play holds.
    succeeded(run(command("deploy", B1) + ["--limit", "app2.example.com"]))
    assert beat_hosts() == ["ownapp-bookworm"]
    # app2 first in the inventory: beat moves, stopped on app1 before it starts on app2.
    inventory("app2.example.com", "app1.example.com")
    moved = run(command("deploy", B1))
    succeeded(moved)
    assert "now run on app2.example.com" in moved.stdout and "stopped first on app1.example.com" in moved.stdout, \
        moved.stdout[-3000:]
    assert beat_hosts() == ["ownapp-trixie"]
    assert host("ownapp-bookworm").run(f"systemctl is-enabled --quiet {BEAT}").rc != 0
    # app2 retired as the README says (its app stopped) and taken out of the inventory: beat comes back to app1.
    host("ownapp-trixie").check_output("systemctl disable --now ledger.target")
    inventory("app1.example.com")
    succeeded(run(command("deploy", B1)))
    assert beat_hosts() == ["ownapp-bookworm"] and build_of("ownapp-bookworm", BEAT) == B1
