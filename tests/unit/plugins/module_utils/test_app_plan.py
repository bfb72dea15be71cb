"""The app plan: one test per derived value, each worked out by hand."""

from __future__ import annotations

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.app_plan import (
    AppPlanError,
    instance_pattern,
    member,
    plan,
    resolve,
)

WORKER = {"name": "worker", "adapter": "celery", "celery_app": "shop.celery", "queues": ["default"],
          "command": ["bin/shop-worker", "-Q", "default"], "instances": 2}
WEB = {"name": "web", "command": ["/srv/shop/current/bin/shop-web", "--port", "8000"], "user": "www",
       "working_directory": "/srv/shop/current"}
BEAT = {"name": "beat", "command": ["/usr/bin/celery", "beat"], "singleton": True}
RELEASE = "/srv/shop/releases/2026.11.29-2"


def shop(**kw):
    args = {"build_id": "2026.11.29-2", "processes": [WORKER, WEB, BEAT], "secrets": ["BROKER_URL"],
            "migrate_command": ["bin/shop-migrate", "--noinput"]}
    return plan("shop", **{**args, **kw})


def by_name(p, name):
    return next(proc for proc in p["processes"] if proc["name"] == name)


def test_paths_default_to_srv_app():
    p = shop()
    assert (p["root"], p["releases"], p["current"], p["previous"]) == (
        "/srv/shop", "/srv/shop/releases", "/srv/shop/current", "/srv/shop/previous")
    assert p["lock"] == "/srv/shop/.deploy.lock" and "incoming" not in p
    assert p["release"] == "/srv/shop/releases/2026.11.29-2"
    assert (p["last_deploy"], p["deployed"]) == ("/srv/shop/.last-deploy.json", "/srv/shop/.deployed.json")


def test_state_files_are_every_file_a_deploy_writes():
    p = shop()
    assert p["state_files"] == ["/etc/systemd/system/shop.target", "/etc/systemd/system/shop-*",
                                "/etc/systemd/system/sturdy-metrics-shop.*", "/etc/shop",
                                "/etc/sturdy-workers/shop.metrics.json*"]
    assert (p["metrics_unit"], p["metrics_config"]) == ("sturdy-metrics-shop", "/etc/sturdy-workers/shop.metrics.json")


def test_root_can_be_moved_and_is_normalised():
    p = shop(root="/opt/apps/shop/")
    assert p["current"] == "/opt/apps/shop/current" and p["lock"] == "/opt/apps/shop/.deploy.lock"
    assert by_name(p, "worker")["command"][0] == "/opt/apps/shop/releases/2026.11.29-2/bin/shop-worker"


def test_no_build_no_release():
    assert shop(build_id="")["release"] == ""


def test_unit_names_target_and_marker():
    p = shop()
    assert p["target"] == "shop.target"
    assert p["marker"] == "# sturdy.workers: app=shop"
    assert p["unit_dir"] == "/etc/systemd/system"
    assert p["unit_files"] == ["shop-*@.service", "shop-*@.socket", "shop.target"]
    worker = by_name(p, "worker")
    assert worker["template"] == "shop-worker@.service"
    assert worker["units"] == ["shop-worker@1.service", "shop-worker@2.service"]
    assert by_name(p, "web")["units"] == ["shop-web@1.service"]


def test_instance_patterns_match_this_app_only():
    import re

    app = re.compile(shop()["instance_pattern"])
    assert app.match("shop-worker@1.service") and app.match("shop-web@12.service")
    assert not app.match("shop-api-worker@1.service".replace("shop-api", "shopx")) and not app.match("shop.target")
    worker = re.compile(by_name(shop(), "worker")["unit_pattern"])
    assert worker.match("shop-worker@3.service") and not worker.match("shop-worker2@1.service")
    assert not re.match(instance_pattern("shop", "web"), "shop-webhook@1.service")


def test_accounts_default_to_the_app_name():
    p = shop()
    assert (p["user"], p["group"]) == ("shop", "shop")
    assert p["users"] == ["shop", "www"] and p["groups"] == ["shop"]
    assert by_name(p, "web")["user"] == "www" and by_name(p, "web")["group"] == "shop"
    assert shop(user="svc", group="svcg")["users"] == ["svc", "www"]


def test_secret_layout_and_directives():
    p = shop(delivery="credentials")
    assert p["secrets"]["credential_files"] == {"BROKER_URL": "/etc/shop/credentials/BROKER_URL"}
    assert p["secrets"]["directives"] == ["LoadCredential=BROKER_URL:/etc/shop/credentials/BROKER_URL"]
    assert shop()["secrets"]["directives"] == ["EnvironmentFile=/etc/shop/shop.env"]


def test_smoke_processes_are_those_with_a_smoke_adapter():
    p = shop()
    assert [proc["name"] for proc in p["smoke_processes"]] == ["worker"]
    assert by_name(p, "worker")["smoke"] and not by_name(p, "web")["smoke"]
    assert by_name(p, "web")["adapter"] == "none"


def test_each_real_queue_is_smoke_tested_once_through_a_process_type_that_consumes_it():
    sweeper = {"name": "sweeper", "adapter": "command", "smoke_command": ["bin/sweep-smoke"],
               "queues": ["sweeps", "default"], "command": ["bin/sweeper"]}
    p = shop(processes=[WORKER, WEB, sweeper])
    assert [(proc["name"], proc["real_queues"]) for proc in p["smoke_processes"]] == [
        ("worker", ["default"]), ("sweeper", ["sweeps"])]


def test_commands_inside_the_release_name_the_build_and_run_from_it():
    # A unit names the build it was written for: switching is writing the units, whatever current names.
    worker = by_name(shop(), "worker")
    assert worker["command"] == [f"{RELEASE}/bin/shop-worker", "-Q", "default"]
    assert worker["member"] == "bin/shop-worker"
    assert worker["working_directory"] == RELEASE
    # Without a build (status, the smoke client): through current.
    worker = by_name(shop(build_id=""), "worker")
    assert worker["command"][0] == "/srv/shop/current/bin/shop-worker"
    assert worker["working_directory"] == "/srv/shop/current"


def test_absolute_commands_keep_working():
    web, beat = by_name(shop(), "web"), by_name(shop(), "beat")
    assert web["command"][0] == f"{RELEASE}/bin/shop-web" and web["member"] == "bin/shop-web"
    assert web["working_directory"] == RELEASE
    assert beat["command"][0] == "/usr/bin/celery" and beat["member"] is None
    assert beat["working_directory"] is None


def test_executables_name_what_declares_them():
    assert shop()["executables"] == {
        "bin/shop-worker": "sturdy_processes[worker].command[0]=bin/shop-worker",
        "bin/shop-web": "sturdy_processes[web].command[0]=/srv/shop/current/bin/shop-web",
        "bin/shop-migrate": "sturdy_migrate_command[0]=bin/shop-migrate",
    }


def test_migration_resolves_against_the_new_release():
    assert shop()["migrate"] == {"member": "bin/shop-migrate",
                                 "command": ["/srv/shop/releases/2026.11.29-2/bin/shop-migrate", "--noinput"]}
    assert shop(migrate_command=["/usr/local/bin/migrate"])["migrate"]["command"] == ["/usr/local/bin/migrate"]
    assert shop(migrate_command=[])["migrate"] is None


def test_a_one_off_command_resolves_against_the_release_and_is_no_executable_a_deploy_checks():
    p = shop(run_command=["bin/shop-report", "--since", "1d"])
    assert p["run"] == {"member": "bin/shop-report",
                        "command": ["/srv/shop/releases/2026.11.29-2/bin/shop-report", "--since", "1d"]}
    assert "bin/shop-report" not in p["executables"] and shop()["run"] is None
    assert shop(run_command=["/usr/bin/env"])["run"] == {"member": None, "command": ["/usr/bin/env"]}
    with pytest.raises(AppPlanError, match=r"sturdy_run_command must be a non-empty list of strings"):
        shop(run_command="bin/shop-report")


def test_venv_commands_are_members_too():
    p = shop(processes=[{"name": "worker", "command": ["venv/bin/celery", "-A", "shop", "worker"]}])
    assert p["executables"] == {"venv/bin/celery": "sturdy_processes[worker].command[0]=venv/bin/celery",
                                "bin/shop-migrate": "sturdy_migrate_command[0]=bin/shop-migrate"}


def test_relative_artifact_starts_at_the_base_dir():
    assert shop(artifact="dist/a.tar.gz", base_dir="/play")["artifact"] == "/play/dist/a.tar.gz"
    assert shop(artifact="/b/a.tar.gz", base_dir="/play")["artifact"] == "/b/a.tar.gz"


def test_member_and_resolve():
    assert member("/srv/shop/current/venv/bin/celery", "/srv/shop/current") == "venv/bin/celery"
    assert member("/usr/bin/python3", "/srv/shop/current") is None
    assert resolve("bin/x", "/srv/shop/releases/7", "/srv/shop/current") == "/srv/shop/releases/7/bin/x"
    assert resolve("/srv/shop/current/bin/x", "/srv/shop/releases/7", "/srv/shop/current") == "/srv/shop/releases/7/bin/x"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"app": "Shop App"}, 'sturdy_app="Shop App" cannot name units'),
    ({"build_id": 'v1"; rm -rf /'}, 'sturdy_build_id="v1\\"; rm -rf /" cannot go into a unit file'),
    ({"processes": [{"name": "Worker", "command": ["/bin/x"]}]}, 'sturdy_processes[].name="Worker"'),
    ({"processes": [WEB, WEB]}, 'sturdy_processes[].name="web" is declared more than once'),
    ({"processes": [{"name": "w", "command": ["../bin/x"]}]}, "sturdy_processes[w].command[0]: '../bin/x' is not a path inside"),
    ({"processes": [{"name": "w", "command": ["./bin/x"]}]}, "without ./ or ../"),
    ({"processes": [{"name": "w", "command": ["bin/../../x"]}]}, "not a path inside the release"),
    ({"processes": [{"name": "w", "command": []}]}, "sturdy_processes[w].command must be a non-empty list"),
    ({"migrate_command": ["../migrate"]}, "sturdy_migrate_command[0]: '../migrate'"),
    ({"migrate_command": "bin/shop-migrate"}, "sturdy_migrate_command must be a non-empty list of strings (argv)"),
    ({"migrate_command": ["", "x"]}, "sturdy_migrate_command must be a non-empty list"),
    ({"root": "srv/shop"}, "sturdy_release_root='srv/shop' is not an absolute path"),
    ({"delivery": "vault"}, "sturdy_secrets_delivery='vault'"),
    ({"processes": [dict(WORKER, max_surge="one")]}, 'sturdy_processes[worker].max_surge="one": give a number of'),
    ({"processes": [dict(WORKER, max_unavailable=-1)]}, "sturdy_processes[worker].max_unavailable=-1: give a number"),
    ({"processes": [dict(WORKER, max_surge=0, max_unavailable="0%")]},
     "sturdy_processes[worker]: max_surge and max_unavailable are both 0 for 2 instance(s), so no instance could"),
])
def test_declarations_that_cannot_be_planned_name_the_variable(kwargs, message):
    app = kwargs.pop("app", "shop")
    with pytest.raises(AppPlanError) as err:
        plan(app, **{"build_id": "1", "processes": [WORKER], **kwargs})
    assert message in str(err.value)


@pytest.mark.parametrize(("declared", "surge", "unavailable"), [
    ({}, [], 1),
    ({"max_surge": 1}, ["shop-worker@5.service"], 0),
    ({"max_surge": "25%", "max_unavailable": "25%"}, ["shop-worker@5.service"], 1),
    ({"max_surge": "30%"}, ["shop-worker@5.service", "shop-worker@6.service"], 0),  # 1.2 rounded up
    ({"max_unavailable": "60%"}, [], 2),  # 2.4 rounded down
    ({"max_surge": "100%"}, [f"shop-worker@{n}.service" for n in (5, 6, 7, 8)], 0),
    ({"max_surge": 9, "max_unavailable": 9}, [f"shop-worker@{n}.service" for n in (5, 6, 7, 8)], 4),  # at most 4
])
def test_surge_units_follow_the_instances_and_max_unavailable_defaults_to_0_with_a_surge(
        declared, surge, unavailable):
    worker = by_name(plan("shop", processes=[dict(WORKER, instances=4, **declared)]), "worker")
    assert (worker["surge_units"], worker["max_unavailable"]) == (surge, unavailable)
