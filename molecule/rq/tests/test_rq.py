"""An RQ app (tests/apps/parcel) deployed by the collection on bookworm and trixie: each `rq worker` instance is
ready when it listens and answers its own smoke job with the build; a busy instance answers at once; a rolling
restart while jobs flow lets running jobs finish (RQ's warm shutdown) and loses none. The tests run in order."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (B1, B2, EPHEMERAL, HOSTS, SCENARIO_DIR, SECRET, UNITS, URL, host, in_release, playbook, redis,
                      report, running_job, said, succeeded, wait_for)

LONG = 15  # seconds: a job still running when its worker is told to stop
# Busy for longer than the smoke playbook may take to reach the last instance on a loaded machine (CI saw one
# instance idle again, its 15 s job done, before its smoke job came).


def test_build_1_each_instance_is_ready_once_it_listens_and_answered_its_smoke_job():
    rep = report()
    assert (rep["result"], rep["build_id"]) == ("success", B1), rep["message"]
    for name in HOSTS:
        h = host(name)
        for n, unit in enumerate(UNITS, 1):
            assert rep["hosts"][name]["instances"][unit]["smoke_build"] == B1
            shown = h.check_output(f"systemctl show -p Type -p NotifyAccess -p StatusText -p ActiveState {unit}")
            # Ready from the agent inside rq worker, once its warm-shutdown handler is in place.
            assert "Type=notify" in shown and "ActiveState=active" in shown, shown
            assert f"StatusText=listening on sturdy.smoke.parcel-worker@{n}.{name}, parcel.scales" in shown, shown
            # RQ_REDIS_URL came as a credential: not in the unit, its properties or the journal.
            assert SECRET not in h.check_output(f"systemctl cat {unit}") + h.check_output(f"systemctl show {unit}")
        assert SECRET not in h.check_output("journalctl -u 'parcel-*' --no-pager")
    # The real queue: one job through parcel.scales, answered by a worker of build 1.
    smoke = rep["queues"]["parcel.scales"]["smoke"]
    assert smoke["ok"] and smoke["answer"]["build_id"] == B1, smoke


def test_paused_rq_workers_leave_the_jobs_queued_still_answer_their_smoke_jobs_and_resume_runs_them():
    succeeded(playbook("-e", "sturdy_deploy_hosts=apps", "-e", "sturdy_pause_message='moving the scales'",
                       "sturdy.workers.pause"))
    for name in HOSTS:
        for unit in UNITS:
            text = host(name).check_output(f"systemctl show -P StatusText {unit}")
            assert text.startswith("paused by ") and "taking no message from parcel.scales" in text, (name, text)
    in_release("rq-bookworm", "venv/bin/parcel-send paused 4")
    # Paused, each instance still takes the job of its own smoke queue (what a deploy or a restart proves it by).
    succeeded(playbook("-e", f"smoke_build={B1}", str(SCENARIO_DIR / "smoke.yml")))
    for name in HOSTS:
        assert all(a["ok"] for a in json.loads((EPHEMERAL / f"smoke-{name}.json").read_text()))
    assert redis("llen", "'rq:queue:parcel.scales'") == "4"
    assert redis("hexists", "parcel:weighed", "paused-1") == "0"
    resumed = succeeded(playbook("-e", "sturdy_deploy_hosts=apps", "sturdy.workers.resume"))
    assert "consumes again on" in said(resumed), said(resumed)[-2000:]
    for name in HOSTS:
        for n, unit in enumerate(UNITS, 1):
            assert host(name).check_output(f"systemctl show -P StatusText {unit}") == \
                f"listening on sturdy.smoke.parcel-worker@{n}.{name}, parcel.scales"
    wait_for("the four jobs sent while paused weighed", lambda: all(
        redis("hexists", "parcel:weighed", f"paused-{n}") == "1" for n in range(1, 5)), 60)


def test_a_busy_instance_answers_its_smoke_job_at_once_naming_the_job_it_runs():
    # Jobs that run until the test is done with them: no race between their length and the smoke playbook's.
    redis("del", "parcel:busy-done")
    in_release("rq-bookworm", "venv/bin/parcel-send busy 4 --until parcel:busy-done")
    try:
        wait_for("every instance running a busy-* job", lambda: all(
            running_job(name, unit).startswith("busy-") for name in HOSTS for unit in UNITS), timeout=30)
        succeeded(playbook("-e", f"smoke_build={B1}", str(SCENARIO_DIR / "smoke.yml")))
        for name in HOSTS:
            answers = json.loads((EPHEMERAL / f"smoke-{name}.json").read_text())
            assert sorted(a["unit"] for a in answers) == UNITS
            for a in answers:
                # Not waited for behind a running job: the main process's registration answered, naming the job.
                assert a["ok"] and a["answer"]["ran_in"] == "worker", a
                assert a["answer"]["busy"][0]["id"].startswith("busy-") and a["answer"]["build_id"] == B1, a
                assert str(a["answer"]["pid"]) == host(name).check_output(f"systemctl show -P MainPID {a['unit']}")
        # No smoke job is left behind in the instances' queues to answer a later deploy.
        for name in HOSTS:
            for n in (1, 2):
                assert redis("llen", f"'rq:queue:sturdy.smoke.parcel-worker@{n}.{name}'") == "0"
    finally:
        redis("set", "parcel:busy-done", "1")


def test_a_stop_lets_the_running_job_finish_then_the_instance_is_ready_again():
    h, unit = host("rq-bookworm"), UNITS[0]
    # Fresh jobs, one per instance: the busy-* ones of the test before were just told to end.
    wait_for("every instance idle", lambda: not any(running_job(name, u) for name in HOSTS for u in UNITS), timeout=90)
    in_release("rq-bookworm", f"venv/bin/parcel-send stop 4 --seconds {LONG}")
    wait_for(f"{unit} running a stop-* job", lambda: running_job("rq-bookworm", unit).startswith("stop-"), timeout=30)
    job = running_job("rq-bookworm", unit)
    pid = h.check_output(f"systemctl show -P MainPID {unit}")
    since = h.check_output("date '+%Y-%m-%d %H:%M:%S'")
    # SIGTERM (KillMode=mixed: to rq worker only) is RQ's warm shutdown: the work horse finishes its job first.
    h.check_output(f"systemctl restart {unit}")
    done = json.loads(redis("hget", "parcel:weighed", job))
    assert done["build"] == B1 and done["ended"] - done["started"] >= LONG, done
    journal = h.check_output(f"journalctl -u {unit} --since '{since}' --no-pager -o cat")
    asked, ok = journal.find("warm shut down requested"), journal.find(f"Job OK ({job})")
    assert -1 < asked < ok, journal[-3000:]
    assert h.check_output(f"systemctl show -P MainPID {unit}") != pid
    assert "StatusText=listening on" in h.check_output(f"systemctl show -p StatusText {unit}")
    assert redis("zcard", "'rq:failed:parcel.scales'") == "0"


WINDOW = """\
import json, os, signal, sys
import rq.queue
from redis import Redis
from rq import Queue, Worker
conn = Redis.from_url(os.environ["RQ_REDIS_URL"])
queues = [Queue("sturdy-window", connection=conn), Queue("sturdy-window-2", connection=conn)]
for q in queues:
    q.empty()
job = queues[0].enqueue("os.getpid")
def stop_after(original):
    def call(*args, **kwargs):
        result = original(*args, **kwargs)
        if result:
            os.kill(os.getpid(), signal.SIGTERM)
        return result
    return call
if sys.argv[1] == "pop":  # as BLPOP's reply is read: Redis has handed the job over, the pop has not returned
    Redis.blpop = stop_after(Redis.blpop)
else:  # after the pop, inside RQ's fetch of the job it popped
    rq.queue.Queue._fetch_dequeued_job = classmethod(stop_after(rq.queue.Queue._fetch_dequeued_job.__func__))
Worker(queues, connection=conn).work(with_scheduler=False)
print(json.dumps({"status": str(job.get_status(refresh=True)).split(".")[-1].lower(), "waiting": queues[0].count}))
"""


@pytest.mark.parametrize("where", ["pop", "fetch"])
def test_a_stop_that_comes_between_taking_a_job_and_running_it_runs_the_job_first(where):
    # RQ's own loop raises StopRequested from its SIGTERM handler unless the worker is busy, so a stop that comes as
    # BLPOP hands a job over, or after it, before the job started, loses the job: off the queue and in no registry (RQ
    # issues #2236, #2079). The deploy stops every instance, under a stream of jobs: the agent closes that window. Here
    # the SIGTERM is sent exactly there, on the release's RQ and Redis.
    h = host("rq-bookworm")
    h.check_output(f"cat > /tmp/window.py <<'EOF'\n{WINDOW}EOF")
    bare = json.loads(in_release("rq-bookworm", f"venv/bin/python /tmp/window.py {where} 2>/dev/null").splitlines()[-1])
    assert bare == {"status": "queued", "waiting": 0}, bare  # without the agent: lost
    hooked = json.loads(in_release("rq-bookworm", f"STURDY_AGENT=rq venv/bin/python /tmp/window.py {where} 2>/dev/null")
                        .splitlines()[-1])
    assert hooked == {"status": "finished", "waiting": 0}, hooked


SAMPLER = ("systemd-run --unit=consuming-sampler --quiet sh -c 'while [ ! -e /run/stop-sampling ]; do "
           "systemctl list-units --state=active --no-legend --plain parcel-worker@* | wc -l; sleep 0.1; done "
           "> /run/consuming'")


def test_build_2_rolls_out_while_jobs_flow_running_jobs_finish_and_none_is_lost():
    succeeded(playbook("sturdy.workers.build", "-e", f"sturdy_build_id={B2}"))
    # How many instances consume (active: READY=1 sent, no STOPPING=1 yet), sampled every 0.1 s through the deploy.
    for name in HOSTS:
        host(name).check_output("rm -f /run/stop-sampling /run/consuming && " + SAMPLER)
    # A stream of jobs of 1 s, 4 a second: about what the four instances take, so a backlog builds while one restarts.
    stream = subprocess.Popen(["podman", "exec", "rq-trixie", "sh", "-c",
                               f"cd /srv/parcel/current && RQ_REDIS_URL='{URL}' "
                               "venv/bin/parcel-send flow --stream /tmp/stop-flow --every 0.25 --seconds 1"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    deployed = playbook("sturdy.workers.deploy", "-e", f"sturdy_build_id={B2}", "-e", "sturdy_deploy_hosts=apps")
    time.sleep(3)
    host("rq-trixie").check_output("touch /tmp/stop-flow")
    out, err = stream.communicate(timeout=400)
    succeeded(deployed)
    rep = report()
    assert (rep["result"], rep["build_id"]) == ("success", B2), rep["message"]
    for name in HOSTS:
        for unit in UNITS:
            inst = rep["hosts"][name]["instances"][unit]
            assert inst["restarted"] and inst["smoke_build"] == B2, inst
        # max_surge 1: parcel-worker@3 came up first, and the two declared ones restarted one at a time beside it.
        h = host(name)
        h.check_output("touch /run/stop-sampling")
        wait_for("the sampler to stop", lambda: h.run("systemctl is-active --quiet consuming-sampler").rc != 0)
        counts = [int(line) for line in h.check_output("cat /run/consuming").split()]
        assert len(counts) > 50 and min(counts) >= 2 and max(counts) == 3, counts
        assert [s["name"] for s in rep["hosts"][name]["surge"]] == ["parcel-worker@3.service"], rep["hosts"][name]
        # Told to stop once the two were back; never enabled.
        assert h.run("systemctl is-active parcel-worker@3.service").stdout.strip() in ("inactive", "deactivating")
        assert h.run("systemctl is-enabled parcel-worker@3.service").stdout.strip() != "enabled"
    flow = json.loads(out.strip().splitlines()[-1])
    assert flow["sent"] > 40 and flow["missing"] == [] and flow["failed"] == [], (flow, err[-2000:])
    # Jobs ran on both builds: they flowed through the restart.
    assert set(flow["builds"]) == {B1, B2}, flow
    assert redis("zcard", "'rq:failed:parcel.scales'") == "0"


def test_status_shows_each_instance_on_build_2_the_queue_its_workers_and_a_failed_job_with_the_next_step():
    # A job the build cannot run: RQ moves it to its failed job registry, and the status says so.
    in_release("rq-bookworm", "venv/bin/python -c \"import os, redis, rq; rq.Queue('parcel.scales', "
                              "connection=redis.Redis.from_url(os.environ['RQ_REDIS_URL'])).enqueue('parcel.jobs.nope', "
                              "job_id='nope-1')\"")
    wait_for("nope-1 in the failed job registry", lambda: redis("zscore", "'rq:failed:parcel.scales'", "nope-1"))
    result = playbook("sturdy.workers.status", "-e", "sturdy_status_hosts=apps")
    assert SECRET not in result.stdout + result.stderr
    rep = json.loads((EPHEMERAL / "status.json").read_text())
    assert rep["builds"] == {B2: sorted(HOSTS)}, rep["builds"]
    queue = rep["queues"]["parcel.scales"]
    assert queue["depth"] == 0 and len(queue["consumers"]) == 4 and queue["failed_jobs"] == 1, queue
    assert any("1 job(s) in RQ's failed job registry" in p and "rq requeue --queue parcel.scales --all" in p
               for p in rep["problems"]), rep["problems"]


def test_a_worker_killed_mid_job_is_diagnosed_with_the_job_and_what_rq_did_with_it():
    in_release("rq-bookworm", "venv/bin/parcel-send doomed 4 --seconds 20")
    unit = UNITS[1]
    job = wait_for(f"{unit} running a doomed-* job",
                   lambda: "".join(j for j in [running_job("rq-bookworm", unit)] if j.startswith("doomed-")), timeout=30)
    host("rq-bookworm").check_output(f"systemctl kill -s KILL {unit}")
    result = succeeded(playbook("sturdy.workers.diagnose", "-e", f"sturdy_diagnose_unit={unit}", "--limit",
                                "rq-bookworm"))
    said_ = " ".join(result.stdout.split())
    # The agent's record of the job, and RQ's own state of it: not run again by RQ, with the command that requeues it.
    assert f"it was running parcel.jobs.weigh[{job}]" in said_, said_[-3000:]
    assert "RQ still lists it as started" in said_ and f"rq requeue --queue parcel.scales {job}" in said_, said_[-3000:]


def test_an_rq_worker_without_a_redis_url_fails_early_naming_it_and_nothing_changes():
    # The instance killed above is back first (systemd restarts it after RestartSec): then nothing may change.
    # (systemctl is-active succeeds when any one of several units is active: each is read.)
    wait_for("every instance active", lambda: all(
        host(name).run(f"systemctl is-active {' '.join(UNITS)}").stdout.split() == ["active"] * len(UNITS)
        for name in HOSTS), timeout=60)
    before = {name: host(name).check_output(f"systemctl show -P InvocationID {' '.join(UNITS)}") for name in HOSTS}
    result = playbook("sturdy.workers.deploy", "-e", json.dumps(
        {"sturdy_build_id": B1, "sturdy_deploy_hosts": "apps", "sturdy_secrets": {}, "sturdy_secrets_required": []}))
    assert result.returncode != 0
    assert ("sturdy_processes[worker] (adapter rq): `rq worker` and the deploy's smoke client read the Redis URL from "
            "RQ_REDIS_URL, and nothing gives it to them. Nothing was changed.") in said(result), said(result)[-3000:]
    for name in HOSTS:
        assert host(name).check_output("readlink /srv/parcel/current").endswith(B2)
        assert host(name).check_output(f"systemctl show -P InvocationID {' '.join(UNITS)}") == before[name]


def test_the_live_build_again_only_proves_the_instances_and_a_secret_file_changed_by_hand_is_deployed_again():
    # The live path is a link into the live release's secrets generation: that file is changed, and named.
    cred = host("rq-bookworm").check_output("readlink -f /etc/parcel/credentials/RQ_REDIS_URL")
    assert cred.startswith("/etc/parcel/secrets/"), cred
    mode = host("rq-bookworm").check_output(f"stat -c %a {cred}")
    host("rq-bookworm").check_output(f"chmod 0644 {cred}")
    shown = {name: host(name).check_output(f"systemctl show -P InvocationID {' '.join(UNITS)}") for name in HOSTS}
    deploy = ["sturdy.workers.deploy", "-e", f"sturdy_build_id={B2}", "-e", "sturdy_deploy_hosts=apps"]
    succeeded(playbook(*deploy))
    rep = report()
    bookworm, trixie = rep["hosts"]["rq-bookworm"], rep["hosts"]["rq-trixie"]
    # The host nobody touched: nothing installed, written or restarted; its instances proven by their smoke jobs.
    assert (trixie["unchanged"], trixie["switched"], trixie["surge"]) == (True, False, []), trixie
    assert host("rq-trixie").check_output(f"systemctl show -P InvocationID {' '.join(UNITS)}") == shown["rq-trixie"]
    assert any(line.startswith(f"rq-trixie: {B2}, unchanged since its last deploy") for line in rep["summary"])
    # The other: deployed again in full, saying why, and the file is as the deploy writes it.
    assert not bookworm["unchanged"] and bookworm["differs"] == f"{cred} changed since the last deploy", bookworm
    assert host("rq-bookworm").check_output(f"stat -c %a {cred}") == mode
    for name in HOSTS:
        assert all(rep["hosts"][name]["instances"][unit]["smoke_build"] == B2 for unit in UNITS), rep["hosts"][name]
    # Now nothing differs on either host; with sturdy_deploy_force both are deployed in full.
    shown = {name: host(name).check_output(f"systemctl show -P InvocationID {' '.join(UNITS)}") for name in HOSTS}
    succeeded(playbook(*deploy))
    assert all(report()["hosts"][name]["unchanged"] for name in HOSTS), report()["hosts"]
    assert {name: host(name).check_output(f"systemctl show -P InvocationID {' '.join(UNITS)}") for name in HOSTS} == shown
    succeeded(playbook(*deploy, "-e", "sturdy_deploy_force=true"))
    assert [(h["unchanged"], h["differs"]) for h in report()["hosts"].values()] == [
        (False, "sturdy_deploy_force=true")] * len(HOSTS), report()["hosts"]


def agent_line(name):
    """The line of the worker unit naming the agent it was written for."""
    return host(name).check_output("grep -h 'Written for the sturdy.workers agent' /etc/systemd/system/parcel-worker@.service")


def test_a_collection_whose_agent_differs_restarts_every_instance_onto_it_with_the_same_build(tmp_path):
    # An upgrade of the collection that changes the agent, deployed with the build that runs: the release already
    # exists, but the agent in its venv is rewritten, so the running instances must restart to load it.
    installed = Path(os.environ["ANSIBLE_COLLECTIONS_PATH"].split(":")[0]) / "ansible_collections/sturdy/workers"
    upgraded = tmp_path / "ansible_collections/sturdy/workers"
    upgraded.mkdir(parents=True)
    for part in ("galaxy.yml", "meta", "playbooks", "plugins", "roles"):
        copy = shutil.copytree if (installed / part).is_dir() else shutil.copy
        copy(installed / part, upgraded / part)
    # One module of the agent package, the one an RQ worker loads, differs.
    agent = upgraded / "roles/release/files/sturdy_agent/rq_worker.py"
    agent.write_text(agent.read_text() + "UPGRADED = True  # the test's new agent\n")
    shown = {name: host(name).check_output(f"systemctl show -P InvocationID {' '.join(UNITS)}") for name in HOSTS}
    written_for = {name: agent_line(name) for name in HOSTS}
    succeeded(playbook("sturdy.workers.deploy", "-e", f"sturdy_build_id={B2}", "-e", "sturdy_deploy_hosts=apps",
                       collections=str(tmp_path)))
    rep = report()
    for name in HOSTS:
        h = host(name)
        # The same build with other unit files is a release of its own: switched to, and every instance restarted.
        assert (rep["hosts"][name]["unchanged"], rep["hosts"][name]["switched"]) == (False, True), rep["hosts"][name]
        assert rep["hosts"][name]["release"].startswith(f"{B2}~"), rep["hosts"][name]
        for unit in UNITS:
            inst = rep["hosts"][name]["instances"][unit]
            assert inst["restarted"] and inst["smoke_build"] == B2, inst
        # The unit names the agent's digest, over every file of the package.
        assert agent_line(name) != written_for[name] and "(sha256)" in agent_line(name), agent_line(name)
        # Each instance started after the new agent was in the release it runs, so it is the agent it loaded.
        assert "UPGRADED = True" in h.check_output("cat /srv/parcel/current/venv/lib/python3*/site-packages/"
                                                   "sturdy_agent/rq_worker.py")
        now = h.check_output(f"systemctl show -P InvocationID {' '.join(UNITS)}").split()
        assert not set(now) & set(shown[name].split()), (now, shown[name])


def test_the_canary_fails_so_it_is_rolled_back_and_the_other_host_is_never_switched_or_restarted():
    # Build 3 cannot start on these hosts (a drop-in refuses it while current points at it), whichever host goes
    # first; the default rollout is one canary host, then the rest.
    b3 = "2026.12.04-3"
    succeeded(playbook("sturdy.workers.build", "-e", f"sturdy_build_id={b3}"))
    dropin = "/etc/systemd/system/parcel-worker@.service.d/zz-refuse-build-3.conf"
    for name in HOSTS:
        host(name).check_output(f"mkdir -p {dropin.rsplit('/', 1)[0]} && printf '%s\\n' '[Service]' "
                                f"'ExecStartPre=+/bin/sh -c \"readlink /srv/parcel/current | grep -qv {b3}\"' > {dropin} "
                                "&& systemctl daemon-reload")
    shown = {name: host(name).check_output(f"systemctl show -p InvocationID -p MainPID {' '.join(UNITS)}")
             for name in HOSTS}
    units = {name: host(name).check_output("cat /etc/systemd/system/parcel-worker@.service") for name in HOSTS}
    try:
        result = playbook("sturdy.workers.deploy", "-e", f"sturdy_build_id={b3}", "-e", "sturdy_deploy_hosts=apps")
    finally:
        for name in HOSTS:
            host(name).check_output(f"rm -f {dropin} && systemctl daemon-reload")
    assert result.returncode != 0, said(result)[-3000:]
    rep = report()
    assert rep["batches"] == [1, "100%"] and rep["result"] == "rolled_back", rep
    canary = [name for name in HOSTS if rep["hosts"][name]["switched"]]
    assert len(canary) == 1, rep["hosts"]
    (canary,), (other,) = canary, [name for name in HOSTS if name not in canary]
    assert rep["hosts"][canary]["rolled_back_to"] == B2 and "did not come up on the new code" in rep["message"], rep
    # The canary is back on build 2, every instance answering.
    assert host(canary).check_output("readlink /srv/parcel/current").endswith(B2)
    assert host(canary).run(f"systemctl is-active {' '.join(UNITS)}").stdout.split() == ["active"] * len(UNITS)
    # The other host: never switched, its unit file and its running instances exactly as before.
    assert host(other).check_output("readlink /srv/parcel/current").endswith(B2)
    assert host(other).check_output("cat /etc/systemd/system/parcel-worker@.service") == units[other]
    assert host(other).check_output(f"systemctl show -p InvocationID -p MainPID {' '.join(UNITS)}") == shown[other]
    assert not any(i.get("restarted") for i in rep["hosts"][other]["instances"].values()), rep["hosts"][other]
