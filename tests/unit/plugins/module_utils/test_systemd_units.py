from __future__ import annotations

import pytest

from ansible_collections.sturdy.workers.plugins.module_utils.app_plan import plan
from ansible_collections.sturdy.workers.plugins.module_utils.systemd_units import (
    UnitSpecError,
    environment_line,
    exec_line,
    plan_processes,
    restart_delays,
    start_limit_interval,
)

DEFAULTS = {
    "instances": 1,
    "user": "shop",
    "group": "shop",
    "working_directory": None,
    "environment": {},
    "environment_files": [],
    "read_write_paths": [],
    "restart": "on-failure",
    "restart_sec": 5,
    "restart_steps": 5,
    "restart_max_delay": 300,
    "start_limit_burst": 5,
    "stop_timeout": 90,
    "max_task_runtime": None,
    "description": "",
    "stop_margin": 30,
}


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["/usr/bin/python3", "-m", "shop"], "/usr/bin/python3 -m shop"),
        (["/bin/celery", "worker", "-n", "w@%h"], "/bin/celery worker -n w@%%h"),
        (["/bin/x", "$HOME", "${SECRET}"], "/bin/x $$HOME $${SECRET}"),
        (["/bin/x", "default mail"], '/bin/x "default mail"'),
        (["/bin/x", 'say "hi"'], '/bin/x "say \\"hi\\""'),
        (["/bin/x", "back\\slash"], '/bin/x "back\\\\slash"'),
        (["/bin/x", ""], '/bin/x ""'),
        (["/bin/x", ";"], "/bin/x \\;"),
        (["/bin/x", "a\nb"], '/bin/x "a\\nb"'),
    ],
)
def test_exec_line_passes_arguments_verbatim(argv, line):
    assert exec_line(argv) == line


@pytest.mark.parametrize("argv", [[], ["bin/celery"], ["celery", "worker"], "/bin/x", [3]])
def test_exec_line_refuses_what_systemd_cannot_run(argv):
    with pytest.raises(UnitSpecError):
        exec_line(argv)


def test_relative_executable_error_says_how_to_fix():
    with pytest.raises(UnitSpecError, match="not an absolute path.*give the full path"):
        exec_line(["venv/bin/celery"])


def test_environment_line_quotes_every_assignment():
    assert environment_line({"A": "1", "GREETING": '50% "off"', "FLAG": True, "EMPTY": None}) == (
        '"A=1" "GREETING=50%% \\"off\\"" "FLAG=true" "EMPTY="'
    )


@pytest.mark.parametrize("name", ["1A", "A-B", "A B", ""])
def test_environment_line_refuses_bad_names(name):
    with pytest.raises(UnitSpecError, match="not a valid environment variable name"):
        environment_line({name: "x"})


def test_restart_delays_follow_systemds_geometric_steps():
    # systemd.service(5): RestartSec=10s RestartMaxDelaySec=160s RestartSteps=4 -> 10, 20, 40, 80, 160, 160
    assert restart_delays(10, 4, 160, 6, backoff=True) == [10.0, 20.0, 40.0, 80.0, 160.0, 160.0]


def test_restart_delays_are_constant_without_backoff():
    assert restart_delays(5, 5, 300, 3, backoff=False) == [5.0, 5.0, 5.0]


@pytest.mark.parametrize(("steps", "max_delay"), [(0, 300), (5, 5), (5, 3)])
def test_restart_delays_degenerate_settings_mean_constant_delay(steps, max_delay):
    assert restart_delays(5, steps, max_delay, 3, backoff=True) == [5.0, 5.0, 5.0]


def test_start_limit_with_default_10s_window_would_never_trigger():
    # The trap: RestartSec=5s with systemd's 10s/5 lets only 2-3 starts per window.
    interval = start_limit_interval(5, 0, 5, 5, backoff=False)
    assert interval > 5 * 5
    assert interval == 25 + 5 * 2


def test_start_limit_covers_the_backoff_delays():
    # 1, 1.587, 2.520, 4 -> 9.107 + 4 * 2 = 17.1 -> 18
    assert start_limit_interval(1, 3, 4, 4, backoff=True) == 18
    assert start_limit_interval(1, 3, 4, 4, backoff=False) == 12


def _plan(processes, version=257, defaults=None):
    return plan_processes(plan("shop", processes=processes)["processes"], defaults or DEFAULTS, version)


def test_plan_fills_defaults_and_names_units():
    (worker,) = _plan([{"name": "worker", "command": ["/bin/w"], "instances": 2}])
    assert worker["template"] == "shop-worker@.service"
    assert worker["units"] == ["shop-worker@1.service", "shop-worker@2.service"]
    assert worker["user"] == "shop" and worker["stop_timeout"] == 90
    assert worker["exec_start"] == "/bin/w"
    assert "stop_margin" not in worker


def test_plan_zero_instances_has_no_units():
    (worker,) = _plan([{"name": "worker", "command": ["/bin/w"], "instances": 0}])
    assert worker["units"] == []


def test_plan_raises_undeclared_stop_timeout_to_cover_tasks():
    (worker,) = _plan([{"name": "worker", "command": ["/bin/w"], "max_task_runtime": 300}])
    assert worker["stop_timeout"] == 330
    assert worker["stop_timeout_min"] == 330


def test_plan_backoff_depends_on_systemd_version():
    (new,) = _plan([{"name": "w", "command": ["/bin/w"]}], version=254)
    (old,) = _plan([{"name": "w", "command": ["/bin/w"]}], version=253)
    assert new["restart_backoff"] and not old["restart_backoff"]
    assert new["start_limit_interval"] > old["start_limit_interval"]


def test_plan_none_values_fall_back_to_defaults():
    (worker,) = _plan([{"name": "w", "command": ["/bin/w"], "user": None, "restart_sec": None}])
    assert worker["user"] == "shop" and worker["restart_sec"] == 5


def test_plan_errors_name_the_process_and_option():
    # The app plan resolves commands against the release; a relative one that reaches here cannot run.
    raw = {"name": "w", "command": ["w"], "units": [], "description": "w"}
    with pytest.raises(UnitSpecError, match=r"sturdy_processes\[w\]\.command"):
        plan_processes([raw], DEFAULTS, 257)
    with pytest.raises(UnitSpecError, match=r"sturdy_processes\[w\]\.environment"):
        _plan([{"name": "w", "command": ["/bin/w"], "environment": {"BAD NAME": "x"}}])


def test_plan_collects_paths_for_the_absolute_path_check():
    (worker,) = _plan(
        [
            {
                "name": "w",
                "command": ["/bin/w"],
                "working_directory": "/srv/shop",
                "environment_files": ["/etc/shop/shop.env"],
                "read_write_paths": ["/var/lib/shop/data"],
            }
        ]
    )
    assert worker["paths"] == ["/bin/w", "/srv/shop", "/etc/shop/shop.env", "/var/lib/shop/data"]


def test_plan_writes_a_relative_command_from_current():
    (worker,) = _plan([{"name": "w", "command": ["venv/bin/celery", "worker", "-n", "w@%h"]}])
    assert worker["exec_start"] == "/srv/shop/current/venv/bin/celery worker -n w@%%h"
    assert worker["paths"] == ["/srv/shop/current/venv/bin/celery", "/srv/shop/current"]


def test_plan_without_steps_or_room_to_grow_has_no_backoff():
    (no_steps,) = _plan([{"name": "w", "command": ["/bin/w"], "restart_steps": 0}])
    (no_room,) = _plan([{"name": "w", "command": ["/bin/w"], "restart_sec": 300, "restart_max_delay": 300}])
    assert not no_steps["restart_backoff"] and not no_room["restart_backoff"]
    assert no_steps["restart_delays"] == [5.0] * 5


def test_plan_escapes_the_description():
    (worker,) = _plan([{"name": "w", "command": ["/bin/w"], "description": "50% of\nthe load"}])
    assert worker["description"] == "50%% of the load"
    (default,) = _plan([{"name": "w", "command": ["/bin/w"]}])
    assert default["description"] == "shop w"


def test_plan_lists_directories_that_must_exist():
    (worker,) = _plan(
        [{"name": "w", "command": ["/bin/w"], "working_directory": "/srv/shop", "read_write_paths": ["/var/cache/shop"]}]
    )
    assert worker["directories"] == ["/srv/shop", "/var/cache/shop"]


def test_plan_singleton_runs_one_instance_on_one_host_only():
    declared = [{"name": "beat", "command": ["/bin/b"], "singleton": True}]
    (here,) = _plan(declared, defaults=dict(DEFAULTS, singleton_here=True))
    (elsewhere,) = _plan(declared, defaults=dict(DEFAULTS, singleton_here=False))
    assert here["units"] == ["shop-beat@1.service"] and elsewhere["units"] == []
    assert "singleton_here" not in here
    with pytest.raises(UnitSpecError, match=r"sturdy_processes\[beat\]: singleton .* instances: 1"):
        _plan([dict(declared[0], instances=2)])


def test_plan_celery_adapter_needs_the_app_and_gets_readiness_specs():
    with pytest.raises(UnitSpecError, match="celery_app"):
        _plan([{"name": "worker", "command": ["/bin/w"], "adapter": "celery"}])
    (web,) = _plan([{"name": "web", "command": ["/bin/w"], "instances": 2, "readiness": {"http": "http://x/h"}}])
    assert web["restart_specs"] == [{"name": "shop-web@1.service", "http": "http://x/h"},
                                    {"name": "shop-web@2.service", "http": "http://x/h"}]


CELERY = {"name": "worker", "command": ["/bin/w"], "adapter": "celery", "celery_app": "shop.celery"}
WEB = {"name": "web", "command": ["/bin/web"]}


def test_plan_gives_a_listening_process_type_a_socket_unit_per_instance():
    (web,) = _plan([dict(WEB, instances=2, listen=["127.0.0.1:8000", 8001, "[::1]:8000"])])
    assert web["socket_template"] == "shop-web@.socket"
    assert web["listen"] == ["127.0.0.1:8000", "8001", "[::1]:8000"]
    (one,) = _plan([dict(WEB, listen=8000)])
    assert one["listen"] == ["8000"]
    (binds,) = _plan([WEB])
    assert (binds["listen"], binds["socket_template"]) == ([], "")


@pytest.mark.parametrize(
    ("listen", "message"),
    [
        ("localhost:8000", r"\.listen=\"localhost:8000\": \"localhost:8000\" is not a port or an address with a port"),
        (["300.0.0.1:80"], r"\.listen=\[\"300.0.0.1:80\"\]: \"300.0.0.1:80\" is not a port"),
        ([0], r"0 is not a port"),
        ([65536], r"65536 is not a port"),
        ([True], r"true is not a port"),
        (["::1:80"], r"\"::1:80\" is not a port .* '\[::1\]:8000' for IPv6"),
        (["/run/shop.sock"], r"is not a port"),
        ([8000, "8000"], r"8000 is given twice"),
    ],
)
def test_plan_refuses_a_listen_address_systemd_cannot_take(listen, message):
    with pytest.raises(UnitSpecError, match=message):
        _plan([dict(WEB, listen=listen)])


def test_plan_refuses_a_surge_for_a_listening_process_type():
    with pytest.raises(UnitSpecError, match=r"sturdy_processes\[web\]\.max_surge: with listen, systemd holds the "
                                            r"listening socket .* Remove max_surge \(or listen\)"):
        _plan([dict(WEB, instances=2, listen=[8000], max_surge=1)])


def test_plan_splits_a_rate_limit_between_every_instance_of_the_play():
    fleet = [[dict(CELERY, instances=2, rate_limit=20)], [dict(CELERY, instances=2, rate_limit=20)],
             [{"name": "web", "command": ["/bin/web"]}]]
    (worker,) = _plan([dict(CELERY, instances=2, rate_limit=20)], defaults=dict(DEFAULTS, fleet=fleet))
    assert worker["rate_per_instance"] == 5.0 and worker["max_deliveries"] == 5
    # Alone (the role used without a play around it), the host's own instances share it; a singleton counts once.
    (alone,) = _plan([dict(CELERY, instances=3, rate_limit=10)])
    assert alone["rate_per_instance"] == 3.333
    beat = dict(CELERY, name="beat", singleton=True, rate_limit=2)
    (here,) = _plan([beat], defaults=dict(DEFAULTS, fleet=[[beat], [beat], [beat]]))
    assert here["rate_per_instance"] == 2.0
    (unlimited,) = _plan([CELERY])
    assert unlimited["rate_per_instance"] is None and "fleet" not in unlimited


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ({"rate_limit": 0}, r"sturdy_processes\[worker\]\.rate_limit=0: give tasks per second greater than 0"),
        ({"max_deliveries": 0}, r"sturdy_processes\[worker\]\.max_deliveries=0: .* use 1"),
        ({"adapter": "none", "rate_limit": 5}, r"sturdy_processes\[worker\]\.rate_limit: .* Celery workers only; "
                                               r"adapter none has none"),
        ({"adapter": "command", "max_deliveries": 3}, r"\.max_deliveries: .* adapter command has none"),
        ({"rate_limit": 4, "max_surge": 1},
         r"sturdy_processes\[worker\]\.max_surge: the instances share rate_limit=4 .* Remove max_surge \(or rate_limit\)"),
        ({"singleton": True, "instances": 1, "max_surge": "100%"},
         r"sturdy_processes\[worker\]\.max_surge: a singleton runs exactly one instance .* Remove max_surge"),
    ],
)
def test_plan_refuses_limits_it_cannot_enforce(declared, message):
    with pytest.raises(UnitSpecError, match=message):
        _plan([dict(CELERY, **declared)])


@pytest.mark.parametrize(
    ("declared", "written"),
    [
        ({}, (None, None)),
        ({"memory_high": "400M", "memory_max": "512M"}, ("400M", "512M")),
        ({"memory_max": "1G"}, (None, "1G")),
        ({"memory_high": "80%", "memory_max": 536870912}, ("80%", "536870912")),
        ({"memory_high": "infinity"}, ("infinity", None)),
    ],
)
def test_plan_passes_memory_limits_as_systemd_reads_them(declared, written):
    (worker,) = _plan([dict(CELERY, **declared)])
    assert (worker["memory_high"], worker["memory_max"]) == written


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ({"memory_max": "512MB"}, r"sturdy_processes\[worker\]\.memory_max='512MB': give bytes with an optional K, M, "
                                  r"G or T suffix .* for example 512M"),
        ({"memory_high": "150%"}, r"sturdy_processes\[worker\]\.memory_high='150%'"),
        ({"memory_max": "0"}, r"memory_max='0': a unit limited to 0 bytes cannot start"),
        ({"memory_high": "1G", "memory_max": "512M"}, r"sturdy_processes\[worker\]\.memory_high=1G is not below "
                                                      r"memory_max=512M: .* Make memory_high smaller"),
        ({"memory_high": "1024M", "memory_max": "1G"}, r"memory_high=1024M is not below memory_max=1G"),
    ],
)
def test_plan_refuses_memory_limits_systemd_would_not_take(declared, message):
    with pytest.raises(UnitSpecError, match=message):
        _plan([dict(CELERY, **declared)])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"instances": -1}, r"sturdy_processes\[w\]\.instances=-1 is out of range: use 0 \(stop all\) to 64"),
        ({"instances": 65}, r"instances=65 is out of range"),
        ({"max_task_runtime": 100, "stop_timeout": 60},
         r"sturdy_processes\[w\]\.stop_timeout=60s is shorter than max_task_runtime \(100s\) \+ "
         r"sturdy_worker_stop_margin \(30s\).*at least 130"),
        ({"restart_sec": 0}, r"sturdy_processes\[w\] restart timing is unusable \(restart_sec=0,"),
        ({"restart_sec": 10, "restart_max_delay": 5}, r"restart timing is unusable"),
        ({"start_limit_burst": 0}, r"restart timing is unusable"),
        ({"command": ["/home/shop/bin/w"]}, r'sturdy_processes\[w\] uses "/home/shop/bin/w".*outside /home'),
        ({"read_write_paths": ["/run/user/1000"]}, r'uses "/run/user/1000"'),
        ({"working_directory": "/srv/my shop"}, r'uses "/srv/my shop".*no spaces'),
        ({"environment_files": ["relative.env"]}, r'uses "relative.env".*must be absolute'),
    ],
)
def test_plan_refuses_what_no_host_could_run_naming_the_option_and_the_fix(change, message):
    with pytest.raises(UnitSpecError, match=message):
        _plan([{"name": "w", "command": ["/bin/w"], **change}], defaults=dict(DEFAULTS, max_instances=64))


def test_plan_takes_the_edges_of_what_it_allows():
    (zero, most) = _plan([{"name": "w", "command": ["/bin/w"], "instances": 0},
                          {"name": "x", "command": ["/bin/x"], "instances": 64, "max_task_runtime": 100,
                           "stop_timeout": 130, "restart_sec": 5, "restart_max_delay": 5, "restart_steps": 0}],
                         defaults=dict(DEFAULTS, max_instances=64))
    assert zero["units"] == [] and len(most["units"]) == 64 and "max_instances" not in most


@pytest.mark.parametrize(
    ("command", "adapter", "tail"),
    [
        (["venv/bin/celery", "-A", "reports.tasks", "worker", "-Q", "reports"], "celery",
         "worker -Q reports --hostname=w%i@%H"),
        (["/usr/bin/python3", "-m", "celery", "-A", "r", "worker"], "celery", "worker --hostname=w%i@%H"),
        # A node name given is kept, in every spelling.
        (["venv/bin/celery", "-A", "r", "worker", "-n", "w@%h"], "celery", "worker -n w@%%h"),
        (["venv/bin/celery", "-A", "r", "worker", "--hostname=x@%h"], "celery", "worker --hostname=x@%%h"),
        (["venv/bin/celery", "-A", "r", "worker", "-nx@%h"], "celery", "worker -nx@%%h"),
        # A wrapper names its node itself; beat is not a worker; other adapters run other programs.
        (["bin/shop-worker", "-Q", "default"], "celery", "bin/shop-worker -Q default"),
        (["venv/bin/celery", "-A", "r", "beat"], "celery", "-A r beat"),
        (["venv/bin/celery", "-A", "worker", "beat"], "celery", "-A worker beat"),
        (["venv/bin/celery", "--app=r", "--workdir", "/srv/r/current", "worker"], "celery",
         "worker --hostname=w%i@%H"),
        (["venv/bin/celery", "-A", "r", "worker"], "none", "-A r worker"),
    ],
)
def test_a_celery_worker_started_by_celery_gets_a_node_name_per_instance(command, adapter, tail):
    (worker,) = _plan([{"name": "w", "command": command, "adapter": adapter, "celery_app": "r"}])
    assert worker["exec_start"].endswith(tail), worker["exec_start"]


def test_an_rq_worker_is_one_rq_worker_per_instance_and_feeds_no_watchdog():
    (worker,) = _plan([{"name": "worker", "command": ["/srv/p/venv/bin/rq", "worker", "-q", "parcel.scales"],
                        "adapter": "rq", "instances": 2}])
    assert worker["units"] == ["shop-worker@1.service", "shop-worker@2.service"]
    # Its own script around rq.Worker is its business.
    _plan([{"name": "worker", "command": ["/srv/p/bin/my-worker"], "adapter": "rq"}])
    with pytest.raises(UnitSpecError, match=r"adapter rq runs one RQ worker per instance.*rq worker-pool"):
        _plan([{"name": "worker", "command": ["/srv/p/venv/bin/rq", "worker-pool", "-n", "3"], "adapter": "rq"}])
    with pytest.raises(UnitSpecError, match=r"sturdy_processes\[worker\]\.watchdog_sec: only the agent inside a Celery worker"):
        _plan([{"name": "worker", "command": ["/srv/p/venv/bin/rq", "worker"], "adapter": "rq", "watchdog_sec": 30}])


def test_plan_gives_the_rolling_restart_each_types_units_surge_and_batch():
    (worker,) = _plan([dict(CELERY, instances=2, max_surge=1)])
    assert worker["rollout"]["units"] == worker["restart_specs"] and len(worker["restart_specs"]) == 2
    assert worker["rollout"]["surge"] == [{"name": "shop-worker@3.service", "http": None}]
    assert worker["rollout"]["max_unavailable"] == 0
