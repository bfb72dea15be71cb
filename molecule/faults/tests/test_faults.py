"""The running system under faults, on the deploy scenario's app and hosts of its own: what status, metrics, alerts
and diagnose say when instances die, stop, lag, hang, crash at start or run out of memory; a stop timeout shorter
than a task; a readiness URL late or failing. Deploys and messages under load: test_faults_under_load.py, collected
after this file in the same ordered group.

The tests run in order (one xdist group), on build 2 (converge deployed build 5, then 2) unless a test says otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time

from conftest import (APPS, BOOKWORM, BROKER, EPHEMERAL, SECRET, TRIXIE, WEB, WORKERS, collect_and_scrape,
                      dead_letters, host, prometheus, readme_command, recaps, run_as_readme, run_while, runs_of, said,
                      status, task, units_of, wait_for)

B1, B2, B5 = "2026.11.29-1", "2026.11.29-2", "2026.11.29-5"


def default_queue(web) -> dict:
    """The agent's numbers for the default queue (depth, oldest message age), read on the web host."""
    return json.loads(web.check_output(
        "/usr/local/sbin/shop-task --agent stats --celery-app shopdemo.celery --timeout 0.5 default").splitlines()[-1])[0]


def instance(rep: dict, name: str, unit: str) -> dict:
    return next(i for p in rep["hosts"][name]["processes"] for i in p["instances"] if i["unit"] == unit)


def snapshot(name: str) -> str:
    """What a read-only run must leave as it was: the app's files, units, secrets and the units' states."""
    return host(name).check_output(
        "find /srv/shop /etc/systemd/system /etc/shop /var/lib/shop -printf '%p %s %m %u %T@\\n' | sort | md5sum; "
        "systemctl show --property=Id,ActiveState,MainPID,NRestarts,InvocationID 'shop-*' | md5sum")


def test_readme_status_shows_every_instance_on_its_build_and_no_problem():
    # A producer's tasks (the deploys' smoke jobs are not counted), spread over the four single-slot instances, done
    # and counted by the agent on both worker hosts before the snapshot is taken: the metrics below count them.
    host(WEB).check_output("/usr/local/sbin/shop-task --sleep before-status 0.2 20 > /dev/null")
    assert runs_of("before-status", 20) == {"done": 20, "runs": {"1": 20}}
    wait_for("the agents counting the tasks on both worker hosts, none running", lambda: all(host(name).run(
        "grep -qs succeeded /var/lib/shop/sturdy-counts/*.json && ! ls /var/lib/shop/sturdy-tasks/*/*.json").rc == 0
        for name in WORKERS), 30)
    before = {name: snapshot(name) for name in APPS}
    result, rep = status()
    assert {name: snapshot(name) for name in APPS} == before
    assert result.returncode == 0, said(result)[-3000:]
    assert rep["problems"] == [], rep["problems"]
    assert rep["builds"] == {B2: sorted(APPS)}
    for name in APPS:
        for unit in units_of(name):
            got = instance(rep, name, unit)
            assert (got["state"], got["build"], got["build_source"], got["old_release"]) == ("active", B2, "cwd", False)
            assert got["restarts"] == 0 and got["uptime"] > 0
    assert f"{BOOKWORM}  shop-worker@2.service  active" in result.stdout
    assert "OK, no problems" in result.stdout
    # The queue, read once through the agent: empty, and every worker instance answers for it.
    queue = rep["queues"]["default"]
    assert queue["depth"] == 0 and len(queue["consumers"]) == 4, queue
    # The same, as metrics: the collector's textfile, served by node_exporter over HTTP, promtool-clean.
    for name in APPS:
        got = collect_and_scrape(name)
        values = {(metric, labels.get("unit") or labels.get("queue") or labels.get("build") or ""): value
                  for metric, labels, value in got}
        for unit in units_of(name):
            assert values[("sturdy_up", unit)] == 1 and values[("sturdy_old_release", unit)] == 0, got
            assert [labels["build"] for metric, labels, dummy in got
                    if metric == "sturdy_build_info" and labels["unit"] == unit] == [B2]
        assert values[("sturdy_current_build_info", B2)] == 1
        assert ("sturdy_last_deploy_success", "") in values and ("sturdy_metrics_timestamp_seconds", "") in values
        if name in WORKERS:
            assert (values[("sturdy_queue_depth", "default")], values[("sturdy_queue_consumers", "default")]) == (0, 4)
            # The tasks sent above were counted by the agent, by build and outcome: under the build that ran them.
            assert sum(value for metric, labels, value in got if metric == "sturdy_tasks_total"
                       and (labels["outcome"], labels["build"]) == ("succeeded", B2)) > 0, got
    # Every worker answers the agent's health query with its build, release, queues and (none) running tasks.
    answers = json.loads(host(WEB).check_output(
        "/usr/local/sbin/shop-task --agent health --celery-app shopdemo.celery --timeout 2").splitlines()[-1])
    assert len(answers) == 4, answers
    for answer in answers.values():
        assert (answer["build_id"], answer["release"], answer["queues"], answer["tasks"]) == (
            B2, f"/srv/shop/releases/{B2}", ["default"], []), answer
    # The worker's own log lines carry the build it was started as (LogExtraFields=): the last lines of its running
    # invocation, read without filtering on the field, all name build 2.
    for name in WORKERS:
        invocation = host(name).check_output("systemctl show -P InvocationID shop-worker@1.service")
        lines = host(name).check_output(f"journalctl -o json -n 5 _SYSTEMD_INVOCATION_ID={invocation}")
        assert lines and all(json.loads(line).get("STURDY_BUILD_ID") == B2 for line in lines.splitlines()), lines


def test_alerts_playbook_installs_the_rules_prometheus_loads_them_and_reads_every_host():
    env = dict(os.environ, ANSIBLE_LOG_PATH=str(EPHEMERAL / "ansible.log"))
    result = subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], "-e",
                             "sturdy_alerts_hosts=brokers", "sturdy.workers.alerts"], capture_output=True, text=True,
                            timeout=300, check=False, env=env)
    assert result.returncode == 0 and recaps(result)[BROKER]["changed"] == 2, said(result)[-3000:]
    groups = prometheus("rules")["data"]["groups"]
    rules = {r["name"]: r["health"] for g in groups if g["name"] == "sturdy.workers" for r in g["rules"]}
    assert {"SturdyQueueTooOld", "SturdyQueueNoConsumers", "SturdyCrashLooping", "SturdyOldRelease", "SturdyBuildSkew",
            "SturdyInstanceDown", "SturdyQueueUnreadable"} <= set(rules), groups
    assert set(rules.values()) <= {"ok", "unknown"}, rules
    # Every app host's collector output, scraped through node_exporter: one current build, B2, everywhere.

    def scraped():
        found = prometheus("query?query=sturdy_current_build_info")["data"]["result"]
        return found if len(found) == len(APPS) else None

    got = wait_for("Prometheus scraped sturdy_current_build_info from the 3 app hosts", scraped)
    assert sorted((r["metric"]["instance"], r["metric"]["build"]) for r in got) == sorted((f"{n}:9100", B2) for n in APPS)
    # A healthy app raises nothing (the last deploy may have been one of the tests' failed ones: that one is right).
    active = [a["labels"]["alertname"] for a in prometheus("alerts")["data"]["alerts"]]
    assert not [a for a in active if a.startswith("Sturdy") and a != "SturdyDeployFailed"], active


def test_status_names_a_sigkill_a_stopped_instance_and_a_host_left_on_an_old_release():
    trixie, bookworm = host(TRIXIE), host(BOOKWORM)
    pid = trixie.check_output("systemctl show -P MainPID shop-worker@1.service")
    try:
        trixie.check_output(f"kill -9 {pid}")
        deadline = time.monotonic() + 60
        while trixie.check_output("systemctl show -P MainPID shop-worker@1.service") in ("0", pid):
            assert time.monotonic() < deadline, "systemd did not bring shop-worker@1 back after kill -9"
            time.sleep(1)
        trixie.check_output("systemctl stop shop-worker@2.service")
        # current switched by hand, nothing restarted: the processes still run build 2.
        bookworm.check_output(f"ln -sfn releases/{B5} /srv/shop/current.tmp && mv -T /srv/shop/current.tmp /srv/shop/current")
        # A process started by hand from an old release, outside any unit.
        trixie.check_output(f"cd /srv/shop/releases/{B5} && nohup venv/bin/python -c 'import time; time.sleep(300)' "
                            ">/dev/null 2>&1 &")
        stray = trixie.check_output("pgrep -f '^venv/bin/python -c import time'")
        for name in ("shopdemo.fail", "shopdemo.flaky"):
            host(WEB).check_output(f"/usr/local/sbin/shop-task --send {name} metrics-{name.split('.')[1]}")
        result, rep = status("--check", "-e", "sturdy_status_fail_on_problem=true")
        text = said(result)
        assert result.returncode != 0
        assert "problem(s) with shop" in text
        killed = instance(rep, TRIXIE, "shop-worker@1.service")
        assert killed["state"] == "active" and killed["restarts"] == 1 and killed["restarts_last_hour"] >= 1
        assert killed["last_exit"]["words"].startswith("killed by SIGKILL")
        problems = "\n".join(rep["problems"])
        assert f"{TRIXIE} shop-worker@1.service died and was restarted by systemd 1 time(s)" in problems
        assert "last exit: killed by SIGKILL" in problems
        assert f"{TRIXIE} shop-worker@2.service is declared but inactive" in problems
        assert f"{BOOKWORM} shop-worker@1.service runs build {B2} but current is {B5}" in problems
        on_b2 = ", ".join(sorted([WEB, TRIXIE]))
        assert f"hosts point current at different builds: {B2} on {on_b2}; {B5} on {BOOKWORM}" in problems
        assert f"{TRIXIE}: 1 process(es) run the old build {B5} from its release outside the app's units (pids " \
            f"{stray}: " in problems
        assert all(r["changed"] == 0 for r in recaps(result).values()) and recaps(result)
        # Nothing of the above was changed by the status itself.
        assert trixie.check_output("systemctl is-active shop-worker@2.service || true") == "inactive"
        # The same restart as metrics; and a task that failed and one retried once, counted under the build that ran
        # them (the status above ran while the agent counted them).
        got = collect_and_scrape(TRIXIE)
        restarts = {(metric, labels["unit"]): value for metric, labels, value in got if metric.startswith("sturdy_rest")}
        assert restarts[("sturdy_restarts_total", "shop-worker@1.service")] == 1, restarts
        assert restarts[("sturdy_restarts_last_hour", "shop-worker@1.service")] >= 1, restarts
        assert restarts[("sturdy_restarts_total", "shop-worker@2.service")] == 0, restarts

        def outcomes():
            found = {}
            for name in WORKERS:
                for metric, labels, value in collect_and_scrape(name):
                    if metric == "sturdy_tasks_total" and labels["build"] == B2:
                        found[labels["outcome"]] = found.get(labels["outcome"], 0) + value
            return found.get("failed", 0) >= 1 and found.get("retried", 0) >= 1 and found

        try:
            wait_for("a failed and a retried task counted", outcomes, 60)
        except AssertionError:
            # Where the two tasks went: their runs, their results, any dead letter (with its reason), and what the
            # workers logged about them.
            print("runs of metrics-fail, metrics-flaky:", host(BROKER).run(
                f"redis-cli --no-auth-warning -a '{SECRET}' -n 0 mget shop:runs:metrics-fail shop:runs:metrics-flaky").stdout)
            print("dead letters", json.dumps(dead_letters())[:4000])
            for name in WORKERS:
                print(name, host(name).run("journalctl --no-pager -o cat -u 'shop-worker@*' -n 400 | grep -E "
                                           "'shopdemo.fail|shopdemo.flaky|dead-letter|cannot check' | tail -20").stdout)
            raise
    finally:
        bookworm.check_output(f"ln -sfn releases/{B2} /srv/shop/current.tmp && mv -T /srv/shop/current.tmp /srv/shop/current")
        trixie.run("systemctl start shop-worker@2.service")
        trixie.run("pkill -f '^venv/bin/python -c import time'")


def test_status_tells_a_backlog_nobody_consumes_and_how_long_its_oldest_message_waited():
    workers, web = [host(name) for name in WORKERS], host(WEB)
    try:
        for h in workers:
            h.check_output("systemctl stop shop-worker@1.service shop-worker@2.service")
        for n in range(3):
            # A producer with the agent active stamps its messages with the time they were sent.
            web.run(f"STURDY_AGENT=celery /usr/local/sbin/shop-task backlog-{n} v 0.2")
        time.sleep(3)
        result, rep = status()
        assert result.returncode == 0, said(result)[-3000:]
        queue = rep["queues"]["default"]
        assert (queue["depth"], queue["consumers"], queue["oldest_task"]) == (3, [], "shopdemo.record"), queue
        assert queue["oldest_age"] >= 3
        assert any(p.startswith("queue default has 3 message(s) waiting, the oldest waiting") and "no worker consumes it"
                   in p for p in rep["problems"]), rep["problems"]
        # The same in the metrics of a worker host: what the SturdyQueueNoConsumers alert reads.
        got = {(metric, labels.get("unit") or labels.get("queue")): value for metric, labels, value
               in collect_and_scrape(BOOKWORM)}
        assert (got[("sturdy_queue_depth", "default")], got[("sturdy_queue_consumers", "default")]) == (3, 0), got
        assert got[("sturdy_queue_oldest_age_seconds", "default")] >= 3
        assert got[("sturdy_up", "shop-worker@1.service")] == 0
        # Prometheus, scraping both worker hosts, evaluates the shipped rules on it: no consumers and instances down.
        collect_and_scrape(TRIXIE)

        def pending():
            alerts = prometheus("alerts")["data"]["alerts"]
            names = {a["labels"]["alertname"] for a in alerts if a["labels"].get("queue", "default") == "default"}
            return {"SturdyQueueNoConsumers", "SturdyInstanceDown"} <= names and alerts

        alerts = wait_for("SturdyQueueNoConsumers and SturdyInstanceDown pending in Prometheus", pending)
        no_consumers = next(a for a in alerts if a["labels"]["alertname"] == "SturdyQueueNoConsumers")
        assert no_consumers["labels"]["queue"] == "default" and no_consumers["state"] in ("pending", "firing")
    finally:
        for h in workers:
            h.run("systemctl start shop-worker@1.service shop-worker@2.service")
    assert task(WEB, "after-backlog")["build_id"] == B2


@contextlib.contextmanager
def a_long_task_on_one_instance(prefix: str, dropin: str = "", seconds: int = 12):
    """One task of `seconds` (sent as `prefix`) running on worker-trixie's shop-worker@1, the only instance left consuming
    while the block runs; its id. `dropin`: [Service] lines for that instance, in force from then on (a new
    environment from its next start), removed with a restart afterwards. The other instances start again afterwards."""
    trixie, bookworm, web = host(TRIXIE), host(BOOKWORM), host(WEB)
    unit = "shop-worker@1.service"
    records, conf = f"/var/lib/shop/sturdy-tasks/{unit}", f"/run/systemd/system/{unit}.d/zz-test.conf"
    try:
        bookworm.check_output("systemctl stop shop-worker@1.service shop-worker@2.service")
        trixie.check_output("systemctl stop shop-worker@2.service")
        if dropin:
            trixie.check_output(f"mkdir -p {conf.rsplit('/', 1)[0]} && printf '[Service]\\n{dropin}' > {conf}"
                                " && systemctl daemon-reload")
        task_id = web.check_output(f"/usr/local/sbin/shop-task --sleep {prefix} {seconds} 1").splitlines()[-1]
        wait_for("the agent recording the long task as running",
                 lambda: trixie.run(f"grep -qs {task_id} {records}/*.json").rc == 0, 60)
        yield task_id
    finally:
        if dropin:
            trixie.run(f"rm -f {conf} && systemctl daemon-reload && systemctl restart {unit}")
        bookworm.run("systemctl start shop-worker@1.service shop-worker@2.service")
        trixie.run("systemctl start shop-worker@2.service")


def test_readme_diagnose_tells_a_sigkill_and_the_task_it_interrupted_waiting_for_redelivery():
    trixie, web = host(TRIXIE), host(WEB)
    unit = "shop-worker@1.service"
    # The restarted worker looks for unacknowledged messages after 10 s instead of 60: the test waits less.
    with a_long_task_on_one_instance("diagnose", "Environment=SHOP_VISIBILITY_TIMEOUT=10\\n") as task_id:
        # The agent's health query names the task the worker is running.
        answers = json.loads(web.check_output("/usr/local/sbin/shop-task --agent health --celery-app shopdemo.celery "
                                              "--timeout 2").splitlines()[-1])
        running = [t for a in answers.values() if a["unit"] == unit for t in a["tasks"]]
        assert [(t["id"], t["name"]) for t in running] == [(task_id, "shopdemo.sleep")], answers
        pid = trixie.check_output(f"systemctl show -P MainPID {unit}")
        # The whole worker at once (main process and pool), mid-task, as a kill -9 of its process group does.
        trixie.check_output(f"python3 -c 'import os, signal; os.killpg({pid}, signal.SIGKILL)'")

        # Back and ready: a new main process, and active (READY=1 sent), not still activating on a busy machine.
        def back():
            state = dict(line.split("=", 1) for line in trixie.check_output(
                f"systemctl show -p MainPID -p ActiveState {unit}").splitlines())
            return state["MainPID"] not in ("0", pid) and state["ActiveState"] == "active"

        wait_for("systemd bringing the worker back after kill -9", back, 90)
        result = run_as_readme(readme_command("diagnose"))
        text = said(result)
        assert result.returncode == 0, text[-3000:]
        assert f"{TRIXIE} {unit}: active (Result=" in text and "NRestarts=1)" in text
        assert "last death: killed by SIGKILL" in text
        assert "why: it was killed by SIGKILL, and not by systemd's own stop" in text
        assert f"it was running shopdemo.sleep[{task_id}]" in text
        assert "not acknowledged: the broker holds it and hands it out again after the visibility timeout" in text
        assert f"{WEB}: no unit {unit} here" in text
        # Once the visibility timeout is up the broker hands the task out again: it runs once more, to the end, and
        # nothing else runs twice.
        runs = runs_of("diagnose", 1, tries=50)
        assert runs == {"done": 1, "runs": {"2": 1}}, runs
        assert trixie.check_output(f"systemctl show -P NRestarts {unit}") == "1"


def test_a_task_still_running_at_the_stop_timeout_is_killed_said_so_and_runs_again_once():
    # The rolling restart's own module on an instance whose TimeoutStopSec= (3 s, by a drop-in) is shorter than the
    # task it runs (20 s): the warm shutdown waits 3 s, systemd SIGKILLs the task, the module says the stop used its
    # whole timeout, and the broker hands the unacknowledged task out again (acks_late): it runs once more, to the end.
    # 20 s: longer than the module takes to start on a loaded machine (a 12 s task once ended before the stop), shorter
    # than the task time limit (25 s, tests/apps/shop: a 30 s task was stopped by it in its second run).
    trixie = host(TRIXIE)
    unit = "shop-worker@1.service"
    # The restarted worker looks for unacknowledged messages after 30 s instead of 60: the test waits less. Longer
    # than the task, or the broker would hand it out again while its second run still goes.
    with a_long_task_on_one_instance("stoptimeout", r"TimeoutStopSec=3\nEnvironment=SHOP_VISIBILITY_TIMEOUT=30\n",
                                     seconds=20):
        result = subprocess.run(["ansible", TRIXIE, "-i", os.environ["MOLECULE_INVENTORY_FILE"], "-o", "-m",
                                 "sturdy.workers.rolling_restart", "-a", json.dumps({"units": [unit], "settle": 2})],
                                capture_output=True, text=True, timeout=300, check=False)
        assert result.returncode == 0, said(result)[-3000:]
        (restarted,) = json.loads(result.stdout.split(" => ", 1)[1])["restarted"]
        assert restarted["stop_timed_out"] is True and restarted["stop_seconds"] >= 3, restarted
        # systemd's own words for it, in the unit's journal.
        assert "State 'stop-sigterm' timed out" in trixie.check_output(f"journalctl --no-pager -o cat -u {unit} -n 200")
        runs = runs_of("stoptimeout", 1, tries=40)
        assert runs == {"done": 1, "runs": {"2": 1}}, runs
        # A deliberate restart, not a crash: systemd counted none.
        assert trixie.check_output(f"systemctl show -P NRestarts {unit}") == "0"


def test_a_stop_that_outlasts_the_watchdog_drains_its_task_and_is_not_killed():
    # The units' WatchdogSec= is 15 s; the task runs 22 s. While a worker stops, its event loop no longer runs (the
    # pool waits for the task): the agent feeds the watchdog from a thread until the process exits, and the stop
    # stays bounded by TimeoutStopSec= (max_task_runtime 30 s). Unfed, systemd SIGABRTs the worker mid-task.
    trixie = host(TRIXIE)
    unit = "shop-worker@1.service"
    since = trixie.check_output("date +%s")
    with a_long_task_on_one_instance("drain", seconds=22):
        started = time.monotonic()
        trixie.check_output(f"systemctl restart {unit}")
        waited = time.monotonic() - started
    journal = trixie.check_output(f"journalctl --since @{since} --no-pager -o cat -u {unit}")
    # Longer than the watchdog: without the feed this stop would have been killed.
    assert waited > 15, waited
    assert "Watchdog timeout" not in journal, journal[-3000:]
    assert trixie.check_output(f"systemctl show -P Result {unit}") == "success"
    # The task finished in the stopping worker, once; systemd restarted nothing on its own.
    assert runs_of("drain", 1, tries=40) == {"done": 1, "runs": {"1": 1}}
    assert trixie.check_output(f"systemctl show -P NRestarts {unit}") == "0"


def test_a_readiness_url_that_answers_late_is_waited_for_and_one_that_never_answers_2xx_fails_the_restart():
    # The web process's /health answers 503 for its first 20 s (SHOP_HEALTH_SLOW), then always (SHOP_HEALTH_FAIL), by
    # a drop-in; the rolling restart the deploy runs, on its own. The slow one holds a deploy lock's lease (a lock file
    # of the test's own, not the app's): a restart longer than 15 s renews it while it waits, a sign of life that a
    # deploy judged from another controller shows in the middle of a long step.
    web = host(WEB)
    unit, url = "shop-web@1.service", "http://127.0.0.1:8000/health"
    conf, lock = f"/run/systemd/system/{unit}.d/zz-test.conf", "/run/shop-lease-proof.lock"

    def restart(env: str, ready_timeout: int, lease=None):
        web.check_output(f"mkdir -p /run/systemd/system/{unit}.d && printf '[Service]\\nEnvironment={env}\\n' > {conf}"
                         " && systemctl daemon-reload")
        args = {"units": [{"name": unit, "http": url}], "settle": 1, "ready_timeout": ready_timeout, "lease": lease or {}}
        seen = []

        def read_the_lease():
            if lease:
                seen.append(json.loads(web.check_output(f"cat {lock}"))["renewed_epoch"])

        code, text = run_while(["ansible", WEB, "-i", os.environ["MOLECULE_INVENTORY_FILE"], "-o", "-m",
                                "sturdy.workers.rolling_restart", "-a", json.dumps(args)], read_the_lease, 2)
        return code, text, json.loads(text.split(" => ", 1)[1]), seen

    try:
        start = float(web.check_output("date +%s.%N"))
        web.check_output(f"echo '{{\"run_id\": \"lease-proof\", \"started_epoch\": {start}, \"renewed_epoch\": "
                         f"{start}}}' > {lock}")
        code, text, answer, seen = restart("SHOP_HEALTH_SLOW=20", 60, {"path": lock, "run_id": "lease-proof"})
        assert code == 0, text[-3000:]
        (restarted,) = answer["restarted"]
        assert restarted["ready_seconds"] >= 20, restarted
        # Read while the module still ran: a renewal about 15 s into it (not the lock's start, not after the end).
        renewals = sorted(set(seen) - {start})
        assert renewals and renewals[0] - start >= 14, (start, seen)
        code, text, answer, dummy = restart("SHOP_HEALTH_FAIL=1", 6)
        assert code != 0 and answer["failed_unit"] == unit, text[-3000:]
        assert f"{url} did not answer 2xx within 6s" in answer["msg"], answer["msg"]
    finally:
        web.run(f"rm -f {conf} {lock} && systemctl daemon-reload && systemctl restart {unit}")
    wait_for(f"{unit} healthy again", lambda: web.run(
        f"python3 -c 'import urllib.request; urllib.request.urlopen(\"{url}\", timeout=2)'").rc == 0, 30)


def test_readme_diagnose_tells_a_watchdog_kill_a_crash_at_import_and_a_start_timeout_and_masks_the_secret():
    bookworm, trixie = host(BOOKWORM), host(TRIXIE)
    unit = "shop-worker@2.service"
    dropin = f"/run/systemd/system/{unit}.d/zz-test.conf"
    # A hung event loop: bookworm's first instance's main process frozen (SIGSTOP) past its WatchdogSec= (15 s).
    hung = "shop-worker@1.service"
    hung_pid = bookworm.check_output(f"systemctl show -P MainPID {hung}")
    since = bookworm.check_output("date +%s")
    bookworm.check_output(f"kill -STOP {hung_pid}")
    try:
        # At import: a RuntimeError naming the broker URL (with its password). At start: 30 s to import, 3 s allowed.
        for h, lines in ((bookworm, r"Environment=SHOP_CRASH_ON_IMPORT=1\n"),
                         (trixie, r"Environment=SHOP_SLOW_START=30\nTimeoutStartSec=3\n")):
            h.check_output(f"mkdir -p /run/systemd/system/{unit}.d && printf '[Service]\\n{lines}' > {dropin}"
                           " && systemctl daemon-reload")
            # The earlier tests' restarts and kills count toward its start limit: a refused start is not what this
            # test provokes (seen once: Result=start-limit-hit on trixie, no start timeout to diagnose).
            h.run(f"systemctl reset-failed {unit}; systemctl restart {unit}")
        for h in (bookworm, trixie):
            deadline = time.monotonic() + 60
            # Until the drop-in's start has failed (Result= no longer the clean stop's "success"): "not active" alone
            # also held while the old instance was still stopping, and the diagnosis then saw no failure yet.
            while h.check_output(f"systemctl show -P Result {unit}") == "success":
                assert time.monotonic() < deadline, f"{unit} did not fail with the test's drop-in"
                time.sleep(1)
        # systemd sends its WatchdogSignal (SIGABRT), delivered once the process runs again; Restart=on-failure
        # brings the instance back.
        wait_for(f"systemd's watchdog timeout for {hung}", lambda: "Watchdog timeout" in bookworm.check_output(
            f"journalctl --since @{since} --no-pager -o cat -u {hung}"), 60)
        # (systemd sends SIGCONT after it, so that a stopped process gets it: the kill needs no help.)
        wait_for(f"{hung} back after its watchdog kill", lambda: bookworm.check_output(
            f"systemctl show -P MainPID {hung}") not in ("0", hung_pid) and bookworm.check_output(
            f"systemctl is-active {hung} || true") == "active", 90)
        # Without a unit: every instance not active or that systemd restarted on its own.
        argv = ["sturdy_diagnose_unit=" if a.startswith("sturdy_diagnose_unit=") else a
                for a in readme_command("diagnose")]
        result = run_as_readme(argv)
        text = said(result)
        assert result.returncode == 0, text[-3000:]
        watchdog = text[text.find(f"{BOOKWORM} {hung}:"):][:1500]
        # (killed by SIGABRT, or dumped core on SIGABRT where core dumps are allowed)
        assert "SIGABRT (invocation" in watchdog and "it missed its watchdog (WatchdogSec=): its event loop " \
            "hung, so systemd killed it (SIGABRT)" in watchdog, watchdog
        # Celery exits with status 2 when the app cannot be imported.
        assert f"{BOOKWORM} {unit}:" in text and "last death: exited with status 2" in text, text[-4000:]
        assert "after a Python exception: RuntimeError: build" in text
        assert "broken on purpose (crash-on-start variant), broker ********" in text
        assert "fix the error the traceback shows" in text
        assert "it did not become ready within its start timeout (TimeoutStartSec=, no READY=1)" in text, (
            text[text.find(TRIXIE):][-4000:])
        assert "a broker it cannot reach, a slow import" in text
        assert SECRET not in result.stdout + result.stderr
    finally:
        bookworm.run(f"kill -CONT {hung_pid}")
        for h in (bookworm, trixie):
            h.run(f"rm -f {dropin} && systemctl daemon-reload && systemctl reset-failed {unit}; systemctl restart {unit}")
    assert task(WEB, "after-diagnose-crash")["build_id"] == B2


def test_readme_diagnose_tells_an_oom_kill_under_memory_max():
    # bookworm's systemd has a memory controller (privileged, its own cgroup namespace: molecule.yml). An instance
    # whose MemoryMax= (a drop-in, 40M) is below what its Celery main process needs to import is OOM-killed as it
    # starts. systemd 252 on cgroup v1 records only "signal" (9/KILL): the kernel's oom-kill line, naming the unit,
    # tells. (That another unit's OOM kill is not taken for this one's: the unit tests, on the kernel's own lines.)
    bookworm = host(BOOKWORM)
    unit = "shop-worker@2.service"
    dropin = f"/run/systemd/system/{unit}.d/zz-test.conf"
    since = bookworm.check_output("date +%s")
    try:
        bookworm.check_output(f"mkdir -p /run/systemd/system/{unit}.d && printf '[Service]\\nMemoryMax=40M\\n' > "
                              f"{dropin} && systemctl daemon-reload && systemctl reset-failed {unit}; "
                              f"systemctl restart --no-block {unit}")
        wait_for(f"the kernel's OOM kill in {unit}", lambda: unit in bookworm.run(
            f"journalctl -k --since @{since} --no-pager -o cat | grep oom-kill:").stdout, 90)
        result = run_as_readme([f"sturdy_diagnose_unit={unit}" if a.startswith("sturdy_diagnose_unit=") else a
                                for a in readme_command("diagnose")])
        text = said(result)
        assert result.returncode == 0, text[-3000:]
        mine = text[text.find(f"{BOOKWORM} {unit}:"):][:1500]
        assert "last death: killed by SIGKILL" in mine and (
            "why: the OOM killer killed it: the unit or the host ran out of memory") in mine, mine
    finally:
        bookworm.run(f"rm -f {dropin} && systemctl daemon-reload && systemctl reset-failed {unit}; "
                     f"systemctl restart {unit}")
    wait_for(f"{unit} back without its memory limit", lambda: bookworm.run(
        f"systemctl is-active {unit}").stdout.strip() == "active", 90)
