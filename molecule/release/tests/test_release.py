"""The demo app deployed with the release, secrets and worker roles, as an operator would check it.

Tests on one host run in file order (conftest.py): build 1 is converged by molecule, then builds 2-4 and
a rollback are deployed here, with the refusals in between. Secrets are compared by digest.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import (
    BUILDS,
    LOG,
    artifact,
    declaration,
    deploy,
    digest,
    health,
    invocations,
    link,
    main_pid,
    play,
    recap,
    releases,
    said,
    secret_values,
    snapshot,
    task,
)

V1, V2, V3, V4 = BUILDS
DELIVERY = {"shop-bookworm": "env_file", "shop-trixie": "encrypted_credentials"}


def delivery(host) -> str:
    return DELIVERY[host.backend.get_hostname()]


# --- build 1, as converge left it -------------------------------------------------------------------------


def test_release_is_installed_root_owned_with_its_venv_and_release_json(host):
    root = host.file("/srv/shop")
    assert (root.user, root.group, root.mode) == ("root", "root", 0o755)
    release = host.file(f"/srv/shop/releases/{V1}")
    assert (release.user, release.mode) == ("root", 0o755)
    assert host.file(f"/srv/shop/releases/{V1}/bin/shop-worker").mode == 0o755
    assert host.file(f"/srv/shop/releases/{V1}/venv/bin/celery").is_file
    info = json.loads(host.file(f"/srv/shop/releases/{V1}/RELEASE.json").content_string)
    published = open(artifact(V1) + ".sha256").read().split()[0]
    assert info["build_id"] == V1 and info["checksum"] == published and info["artifact"] == f"shop-{V1}.tar.gz"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", info["installed_at"])
    assert not host.file(f"/srv/shop/releases/{V1}/.sturdy-partial").exists
    # The upload is gone (Ansible's temporary directory with it): the release directory holds everything.
    assert host.run("find /srv /root /tmp /var/tmp -name 'shop-*.tar.gz'").stdout == ""
    assert host.package("python3-venv").is_installed


def test_release_was_installed_with_pypi_unreachable(host):
    # prepare.yml points PyPI's names at a closed port; the install had only the wheelhouse.
    probe = host.run("python3 -c 'import urllib.request; urllib.request.urlopen(\"https://pypi.org/simple/\", timeout=5)'")
    assert probe.rc != 0
    venv = f"/srv/shop/releases/{V1}/venv"
    assert host.check_output(f"{venv}/bin/python -c 'import importlib.metadata as m; print(m.version(\"celery\"))'")
    # Installed by the interpreter's own pip wheel: none in the release, which is never installed into again.
    assert not host.file(f"{venv}/bin/pip").exists
    assert host.run(f"{venv}/bin/python -m pip --version").rc != 0


def test_current_points_at_build_1_and_processes_run_from_it(host):
    assert link(host, "current") == f"releases/{V1}"
    for unit in ("shop-worker@1.service", "shop-worker@2.service", "shop-web@1.service"):
        assert host.service(unit).is_running, unit
        cwd = host.check_output("readlink /proc/%s/cwd", main_pid(host, unit))
        assert cwd == f"/srv/shop/releases/{V1}", unit


def test_a_task_enqueued_by_a_producer_is_processed_by_build_1(host):
    answer = task(host, f"v1-{host.backend.get_hostname()}")
    assert answer["build_id"] == V1
    assert health(host) == {"status": "ok", "build_id": V1}


def test_every_process_stops_on_sigterm_well_within_its_stop_timeout(host):
    # A process that ignores SIGTERM turns each rolling restart into a wait for TimeoutStopSec and a SIGKILL.
    for unit in ("shop-web@1.service", "shop-worker@1.service"):
        host.check_output("systemctl stop %s", unit)
        props = host.check_output("systemctl show -p Result,ExecMainStatus %s", unit)
        host.check_output("systemctl start %s", unit)
        assert "Result=success" in props, (unit, props)
        took = host.check_output("journalctl -u %s -n 20 -o cat | grep -c 'timed out. Killing' || true", unit)
        assert took == "0", unit


WINDOW = """\
import json, os, signal, sys
from billiard.pool import ApplyResult
from shopdemo import store
from shopdemo.celery import app, sleep

QUEUE, KEY = "sturdy-window", "window-1"
db = store.client()
db.delete(QUEUE, store.RUNS.format(key=KEY), store.EFFECT.format(key=KEY))
ack, done, held = ApplyResult._ack, ApplyResult._set, {}


def late_ack(self, *args, **kwargs):
    # The pool's child has started the job; the stop comes before the main process reads that, which it does only
    # once the job is done, as a main process held up on a busy machine would.
    if not held:
        held[self._job] = (args, kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        return None
    return ack(self, *args, **kwargs)


def late_done(self, *args, **kwargs):
    if self._job in held:
        ack(self, *held[self._job][0], **held[self._job][1])
    return done(self, *args, **kwargs)


ApplyResult._ack, ApplyResult._set = late_ack, late_done
sleep.apply_async((KEY, 2), queue=QUEUE)
try:
    app.worker_main(["worker", "-Q", QUEUE, "-c", "1", "-P", "prefork", "-n", "window@%h", "--without-mingle",
                     "--without-gossip", "--without-heartbeat", "-l", "WARNING"])
except SystemExit:
    pass
print(json.dumps({"runs": int(db.get(store.RUNS.format(key=KEY)) or 0), "requeued": db.llen(QUEUE)}), file=sys.__stdout__)
db.delete(QUEUE)
"""


def test_a_task_a_pool_child_started_just_before_a_warm_shutdown_is_acknowledged_not_run_again(host):
    # Celery 5.6.3+ drops from its pool, as the warm shutdown flushes it, a job whose start the main process has not
    # read yet, though the child runs it: never acknowledged, the message goes back to the queue and the task runs
    # twice. The stop is sent exactly there, in a worker of the release's app and its broker, with the secrets as
    # systemd hands them over (shop-task's way), without and with the agent.
    host.check_output(f"cat > /tmp/window.py <<'EOF'\n{WINDOW}EOF")
    host.check_output("sed 's#^exec .*#exec /srv/shop/current/venv/bin/python /tmp/window.py#' /usr/local/sbin/shop-task "
                      "> /tmp/window.sh && chmod 0700 /tmp/window.sh")
    bare = json.loads(host.check_output("timeout 120 /tmp/window.sh 2>/dev/null").splitlines()[-1])
    assert bare == {"runs": 1, "requeued": 1}, bare  # Celery alone: ran once, and back in the queue to run again
    hooked = json.loads(host.check_output("STURDY_AGENT=celery timeout 120 /tmp/window.sh 2>/dev/null").splitlines()[-1])
    assert hooked == {"runs": 1, "requeued": 0}, hooked


POPPED = """\
import json, os, signal, socket, sys, threading, time
from urllib.parse import urlsplit, urlunsplit
from shopdemo import store
from shopdemo.celery import app, sleep
from shopdemo.settings import broker_url

QUEUE, KEY = "sturdy-popped", "popped-1"
db = store.client()
db.delete(QUEUE, store.RUNS.format(key=KEY), store.EFFECT.format(key=KEY))
sleep.apply_async((KEY, 0.1), queue=QUEUE)
# The worker reaches Redis through a proxy that, the moment Redis's answer to a BRPOP carries the task, forwards it,
# carries nothing more on the connections it had and closes them, then refuses new ones for 3 s: the broker gone
# between kombu's pop and its record of the message as unacknowledged, as when Redis stops.
url = urlsplit(broker_url())
listener = socket.create_server(("127.0.0.1", 0))
cut = threading.Event()
conns = []


def pump(src, dst, answers, born):
    try:
        while data := src.recv(65536):
            if cut.is_set() and born <= cut.at:
                break  # a connection from before the cut carries nothing more: the worker's record never arrives
            hit = answers and KEY.encode() in data and not cut.is_set()
            if hit:
                cut.at = time.monotonic()
                cut.set()
            dst.sendall(data)
            if hit:
                for s in list(conns):
                    try:
                        s.shutdown(socket.SHUT_RDWR)  # close() alone wakes no thread blocked on it
                    except OSError:
                        pass
    except OSError:
        pass


def serve():
    while True:
        client, _ = listener.accept()
        if cut.is_set() and time.monotonic() - cut.at < 3:
            client.close()
            continue
        upstream, born = socket.create_connection((url.hostname, url.port or 6379)), time.monotonic()
        conns.extend([client, upstream])
        threading.Thread(target=pump, args=(client, upstream, False, born), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client, True, born), daemon=True).start()


def stop_when_done():
    cut.wait(60)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not int(db.get(store.RUNS.format(key=KEY)) or 0):
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)


cut.at = 0.0
for target in (serve, stop_when_done):
    threading.Thread(target=target, daemon=True).start()
netloc = url.netloc.rsplit("@", 1)[0] + "@" if "@" in url.netloc else ""
# The environment is what Celery reads first; its command line takes the broker from BROKER_URL, the demo's name too.
os.environ["CELERY_BROKER_URL"] = os.environ["BROKER_URL"] = urlunsplit(
    url._replace(netloc=f"{netloc}127.0.0.1:{listener.getsockname()[1]}"))
try:
    app.worker_main(["worker", "-Q", QUEUE, "-c", "1", "-P", "prefork", "-n", "popped@%h", "--without-mingle",
                     "--without-gossip", "--without-heartbeat", "-l", "WARNING"])
except SystemExit:
    pass
print(json.dumps({"cut": cut.is_set(), "runs": int(db.get(store.RUNS.format(key=KEY)) or 0), "queued": db.llen(QUEUE),
                  "unacked": sum(KEY in v for v in db.hvals("unacked"))}), file=sys.__stdout__)
db.delete(QUEUE)
"""


def test_a_message_redis_handed_out_as_it_went_away_is_put_back_and_runs_once(host):
    # kombu takes a message off Redis's list (BRPOP) and records it as unacknowledged in a second command: a broker
    # gone in between (a Redis stop) leaves it in the worker alone, and kombu drops it. The broker made to go exactly
    # there, for a worker of the release's app with the secrets as systemd hands them over, without and with the agent.
    host.check_output(f"cat > /tmp/popped.py <<'EOF'\n{POPPED}EOF")
    host.check_output("sed 's#^exec .*#exec /srv/shop/current/venv/bin/python /tmp/popped.py#' /usr/local/sbin/shop-task "
                      "> /tmp/popped.sh && chmod 0700 /tmp/popped.sh")
    bare = json.loads(host.check_output("timeout 120 /tmp/popped.sh 2>/dev/null").splitlines()[-1])
    assert bare == {"cut": True, "runs": 0, "queued": 0, "unacked": 0}, bare  # Celery alone: the task is gone
    hooked = json.loads(host.check_output("STURDY_AGENT=celery timeout 120 /tmp/popped.sh 2>/dev/null").splitlines()[-1])
    assert hooked == {"cut": True, "runs": 1, "queued": 0, "unacked": 0}, hooked


def test_secret_files_have_the_owner_and_mode_of_their_delivery(host):
    if delivery(host) == "env_file":
        env = host.file("/etc/shop/shop.env")
        assert (env.user, env.group, env.mode) == ("root", "shop", 0o640)
        assert not host.file("/etc/shop/credentials").exists
    else:
        store = host.file("/etc/shop/credentials")
        assert (store.user, store.mode) == ("root", 0o700)
        for name in ("BROKER_URL", "SHOP_API_TOKEN"):
            cred = host.file(f"/etc/shop/credentials/{name}.cred")
            assert (cred.user, cred.group, cred.mode) == ("root", "root", 0o600)
        assert not host.file("/etc/shop/shop.env").exists


def test_every_process_type_loads_the_same_secrets_by_reference(host):
    expected = {
        "env_file": ["EnvironmentFile=/etc/shop/shop.env"],
        "encrypted_credentials": ["LoadCredentialEncrypted=BROKER_URL:/etc/shop/credentials/BROKER_URL.cred",
                                  "LoadCredentialEncrypted=SHOP_API_TOKEN:/etc/shop/credentials/SHOP_API_TOKEN.cred"],
    }[delivery(host)]
    for process in ("worker", "web"):
        lines = host.file(f"/etc/systemd/system/shop-{process}@.service").content_string.splitlines()
        assert [line for line in lines if line.startswith(("EnvironmentFile=", "LoadCredential"))] == expected


def test_the_secret_reaches_the_process_verbatim(host):
    token = declaration()["shop_api_token"]  # $, quotes, backquote, backslash, #: nothing may be expanded
    pid = main_pid(host, "shop-web@1.service")
    if delivery(host) == "env_file":
        environ = host.check_output("tr '\\0' '\\n' < /proc/%s/environ | sed -n 's/^SHOP_API_TOKEN=//p'", pid)
        assert digest(environ) == digest(token)
    else:
        seen = host.check_output("cat /run/credentials/shop-web@1.service/SHOP_API_TOKEN")
        assert digest(seen) == digest(token)
        # With credentials nothing is in the process environment.
        assert "SHOP_API_TOKEN=" not in host.check_output("tr '\\0' '\\n' < /proc/%s/environ", pid)


# --- refusals: each fails before any change ---------------------------------------------------------------


def refused(host, playbook="converge.yml", **extra) -> str:
    before = snapshot(host)
    result = play(host, playbook, **extra)
    assert result.returncode != 0, result.stdout[-3000:]
    assert snapshot(host) == before
    return said(result)


def test_a_missing_required_secret_is_refused_by_name(host):
    decl = declaration()
    out = refused(host, sturdy_secrets={"BROKER_URL": decl["sturdy_secrets"]["BROKER_URL"], "SHOP_API_TOKEN": ""})
    assert "Required secrets missing or empty in sturdy_secrets: SHOP_API_TOKEN." in out
    assert not any(value in out for value in secret_values()), "a secret value appears in the output"


def test_an_artifact_that_does_not_match_its_checksum_is_refused(host, tmp_path):
    damaged = tmp_path / f"shop-{V2}.tar.gz"
    damaged.write_bytes(open(artifact(V2), "rb").read() + b"\0")
    (tmp_path / f"shop-{V2}.tar.gz.sha256").write_text(open(artifact(V2) + ".sha256").read())
    out = refused(host, sturdy_build_id=V2, sturdy_artifact=str(damaged))
    assert f"sturdy_artifact={damaged} has sha256" in out and "Rebuild or download it again" in out


def test_the_same_build_id_with_other_content_is_refused(host):
    out = refused(host, sturdy_build_id=V1, sturdy_artifact=artifact(V1, "other"))
    assert f"build {V1} is already installed from another artifact" in out
    assert "A build ID names one artifact forever" in out


def test_an_artifact_path_that_does_not_exist_is_refused(host):
    out = refused(host, sturdy_build_id=V2, sturdy_artifact="/nonexistent/shop-2.tar.gz")
    assert "sturdy_artifact=/nonexistent/shop-2.tar.gz does not exist on the controller" in out


# --- build 2, a rollback, and back ------------------------------------------------------------------------


def test_check_mode_previews_build_2_and_changes_nothing(host):
    before = snapshot(host)
    result = play(host, "converge.yml", "--check", "--diff", sturdy_build_id=V2, sturdy_artifact=artifact(V2))
    assert result.returncode == 0, result.stdout[-4000:]
    assert f"current -> {V2}" in said(result)
    assert snapshot(host) == before


def use_up_start_budget(host, unit: str) -> None:
    """Restart `unit` on purpose as often as its start limit allows, leaving it running: the next start is refused
    unless whoever restarts it resets the counter first."""
    burst = int(host.check_output("systemctl show -P StartLimitBurst %s", unit))
    host.check_output("systemctl reset-failed %s", unit)
    host.check_output("for i in $(seq %s); do systemctl restart %s || exit 1; done", str(burst), unit)
    assert host.service(unit).is_running


def test_deploy_build_2_keeps_build_1_and_switches_current(host):
    # Deploys in quick succession: deliberate restarts must not use up the crash-loop budget.
    use_up_start_budget(host, "shop-web@1.service")
    deploy(host, V2)
    assert host.service("shop-web@1.service").is_running
    assert link(host, "current") == f"releases/{V2}"
    assert link(host, "previous") == f"releases/{V1}"
    assert {V1, V2} <= set(releases(host))
    assert health(host)["build_id"] == V2
    # The role's own restart put the worker on build 2: nothing here restarts it.
    cwd = host.check_output("readlink /proc/%s/cwd", main_pid(host, "shop-worker@1.service"))
    assert cwd == f"/srv/shop/releases/{V2}"
    assert task(host, f"v2-{host.backend.get_hostname()}")["build_id"] == V2


def test_deploying_the_same_build_again_changes_nothing(host):
    before = invocations(host)
    result = deploy(host, V2)
    assert recap(result)["changed"] == 0, result.stdout[-4000:]
    assert invocations(host) == before


def test_rollback_points_current_at_build_1_and_restarts_onto_it(host):
    result = play(host, "rollback.yml")
    assert result.returncode == 0, result.stdout[-4000:]
    assert f"current now points at {V1} (was {V2}" in said(result)
    assert link(host, "current") == f"releases/{V1}"
    assert link(host, "previous") == ""  # a second rollback must name its build
    assert V2 in releases(host)  # kept for inspection
    assert health(host)["build_id"] == V1
    assert task(host, f"rollback-{host.backend.get_hostname()}")["build_id"] == V1
    deploy(host, V2)
    assert link(host, "current") == f"releases/{V2}"


# --- secrets change -----------------------------------------------------------------------------------------


def test_a_changed_secret_restarts_the_units_and_never_shows_at_vvv(host):
    decl = declaration()
    db = 0 if host.backend.get_hostname() == "shop-bookworm" else 1
    broker = f"redis://:{decl['shop_redis_password']}@release-broker:6379/{db}"
    rotated = "rotated-" + decl["shop_api_token"][::-1]
    before = invocations(host)
    try:
        result = deploy(host, V2, "-vvv", sturdy_secrets={"BROKER_URL": broker, "SHOP_API_TOKEN": rotated})
        shown = result.stdout + result.stderr
        assert not any(v in shown for v in (*secret_values(), rotated)), "a secret value appears in the -vvv output"
        after = invocations(host)
        assert all(after[unit] != before[unit] for unit in before), (before, after)
        pid = main_pid(host, "shop-web@1.service")
        if delivery(host) == "env_file":
            seen = host.check_output("tr '\\0' '\\n' < /proc/%s/environ | sed -n 's/^SHOP_API_TOKEN=//p'", pid)
        else:
            seen = host.check_output("cat /run/credentials/shop-web@1.service/SHOP_API_TOKEN")
        assert digest(seen) == digest(rotated)
        assert task(host, f"rotated-{host.backend.get_hostname()}")["build_id"] == V2
    finally:
        deploy(host, V2)


def test_switching_to_plain_credentials_moves_every_process_and_removes_the_old_files(host):
    try:
        deploy(host, V2, sturdy_secrets_delivery="credentials")
        assert not host.file("/etc/shop/shop.env").exists
        assert host.file("/etc/shop/credentials/BROKER_URL").mode == 0o600
        assert not host.file("/etc/shop/credentials/BROKER_URL.cred").exists
        assert "LoadCredential=BROKER_URL:/etc/shop/credentials/BROKER_URL" in host.file(
            "/etc/systemd/system/shop-web@.service").content_string
        assert task(host, f"plain-{host.backend.get_hostname()}")["build_id"] == V2
    finally:
        deploy(host, V2)
    assert task(host, f"back-{host.backend.get_hostname()}")["build_id"] == V2


# --- pruning ----------------------------------------------------------------------------------------------


@pytest.fixture
def old_release_user(host):
    """A process still running from build 1's directory, as a slow one-off job would."""
    host.check_output(f"systemd-run --unit=shop-old-job -p WorkingDirectory=/srv/shop/releases/{V1} sleep 900")
    yield
    host.run("systemctl stop shop-old-job.service")


def test_pruning_keeps_current_previous_and_releases_in_use(host, old_release_user):
    deploy(host, V3)
    deploy(host, V4)
    # keep=2, but when build 4 was installed, build 2 was previous and build 1 in use.
    assert set(releases(host)) == {V1, V2, V3, V4}
    assert (link(host, "current"), link(host, "previous")) == (f"releases/{V4}", f"releases/{V3}")
    # The same deploy again once the job has ended: build 2 is no longer previous, build 1 no longer in use.
    host.check_output("systemctl stop shop-old-job.service")
    deploy(host, V4)
    assert set(releases(host)) == {V3, V4}
    assert task(host, f"v4-{host.backend.get_hostname()}")["build_id"] == V4


def test_an_interrupted_install_is_cleaned_up_by_the_next_run(host):
    host.check_output("mkdir -p /srv/shop/releases/2026.11.29-9/venv && touch /srv/shop/releases/2026.11.29-9/.sturdy-partial")
    result = deploy(host, V4)
    assert "Removed 2026.11.29-9 (interrupted installs" in said(result)
    assert not host.file("/srv/shop/releases/2026.11.29-9").exists


# --- last: nothing anywhere shows a secret ----------------------------------------------------------------


def test_no_secret_value_in_ansible_logs_units_systemctl_show_or_journal(host):
    values = secret_values()
    places = {
        "ansible log of the whole run": LOG.read_text() if LOG.exists() else "",
        "unit files": host.check_output("cat /etc/systemd/system/shop*.service /etc/systemd/system/shop.target"),
        "systemctl show": host.check_output("systemctl show 'shop*'"),
        "journal": host.check_output("journalctl -b --no-pager -o cat"),
    }
    assert places["ansible log of the whole run"], f"{LOG} is empty: ANSIBLE_LOG_PATH did not reach the runs"
    leaks = sorted({where for where, text in places.items() for value in values if value in text})
    assert leaks == [], "a secret value appears in these places (values not shown)"
