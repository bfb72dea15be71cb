"""The declaration checked before anything is planned: every problem one line naming the variable and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible_collections.sturdy.workers.plugins.filter.declaration_problems import declaration_problems
from ansible_collections.sturdy.workers.plugins.module_utils.declaration import CHOICES, OPTIONS, problems

ROOT = Path(__file__).resolve().parents[4]
GOOD = {"name": "worker", "command": ["bin/shop-worker"], "adapter": "celery", "celery_app": "shop.celery",
        "queues": ["default"], "instances": 2, "max_task_runtime": 60}


def test_the_options_are_the_worker_role_argument_spec_s():
    spec = yaml.safe_load((ROOT / "roles/worker/meta/argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]["sturdy_processes"]["options"]
    assert sorted(options) == sorted(OPTIONS)
    kinds = {"int": "int", "float": "number", "bool": "bool", "dict": ("environment", "readiness"),
             "list": ("argv", "strings"), "raw": ("size", "listen"), "str": ("str", "choice")}
    for key, option in options.items():
        assert OPTIONS[key][0] in kinds[option["type"]], key
        assert tuple(option.get("choices") or ()) == CHOICES.get(key, ()), key


@pytest.mark.parametrize("change, expected", [
    ({"instances": "two"}, 'sturdy_processes[worker].instances="two": give a whole number, for example instances: 2'),
    ({"instances": -1}, "sturdy_processes[worker].instances=-1: give a whole number 0 or more"),
    ({"instances": 1.5}, "sturdy_processes[worker].instances=1.5: give a whole number"),
    ({"instances": True}, "sturdy_processes[worker].instances=true: give a whole number"),
    ({"max_task_runtime": -5}, "sturdy_processes[worker].max_task_runtime=-5: give a whole number 1 or more"),
    ({"max_task_runtime": "long"}, 'sturdy_processes[worker].max_task_runtime="long": give a whole number'),
    ({"rate_limit": 0}, "sturdy_processes[worker].rate_limit=0: give a number greater than 0"),
    ({"restart": "sometimes"}, 'sturdy_processes[worker].restart="sometimes": give one of always, on-failure'),
    ({"adapter": "celry"}, 'sturdy_processes[worker].adapter="celry": give one of none, celery, rq, command'),
    ({"command": "bin/shop-worker -c 4"}, 'sturdy_processes[worker].command="bin/shop-worker -c 4": give a list of '
                                          'strings (an argv, not one string)'),
    ({"command": ["bin/x", 4]}, 'sturdy_processes[worker].command=["bin/x", 4]: give a list of strings'),
    ({"queues": "default"}, 'sturdy_processes[worker].queues="default": give a list of non-empty strings'),
    ({"queues": ["default", ""]}, 'sturdy_processes[worker].queues=["default", ""]: give a list of non-empty'),
    ({"environment": ["A=1"]}, 'sturdy_processes[worker].environment=["A=1"]: give a mapping of names to values'),
    ({"environment": {"A": [1]}}, "sturdy_processes[worker].environment={\"A\": [1]}: A is not a string or a number"),
    ({"singleton": "yes"}, 'sturdy_processes[worker].singleton="yes": give true or false'),
    ({"max_surge": "lots"}, 'sturdy_processes[worker].max_surge="lots": give a number of instances or a percentage'),
    ({"max_surge": "150%"}, 'sturdy_processes[worker].max_surge="150%": give a number of instances or a percentage'),
    ({"readiness": {"url": "http://x"}}, "sturdy_processes[worker].readiness={\"url\": \"http://x\"}: give a mapping "
                                         "with http"),
    ({"listen": {"port": 8000}}, 'sturdy_processes[worker].listen={"port": 8000}: give the addresses the socket '
                                 "listens on, for example listen: ['127.0.0.1:8000']"),
    ({"listen": [8000, None]}, "sturdy_processes[worker].listen=[8000, null]: give the addresses"),
    ({"liste": [8000]}, "sturdy_processes[worker] has no option liste: did you mean listen?"),
    ({"instance": 2}, "sturdy_processes[worker] has no option instance: did you mean instances?"),
    ({"max_task_run_time": 5}, "sturdy_processes[worker] has no option max_task_run_time: did you mean "
                               "max_task_runtime?"),
    ({"zzz": 1}, "sturdy_processes[worker] has no option zzz; the options are adapter, celery_app"),
    ({"command": None}, "sturdy_processes[worker].command is missing: every process type needs one"),
])
def test_a_bad_option_is_one_line_naming_it_the_value_and_the_fix(change, expected):
    found = problems([{**GOOD, **change}])
    assert len(found) == 1 and found[0].startswith(expected), found


def test_the_shape_of_the_declaration():
    assert problems([GOOD]) == [] and problems(None) == [] and problems([]) == []
    assert problems("worker")[0].startswith('sturdy_processes="worker" is not a list')
    assert problems(["worker"])[0].startswith('sturdy_processes[0]="worker" is not a mapping')
    assert problems([{"command": ["x"]}])[0] == ("sturdy_processes[0].name is missing: every process type needs one, "
                                                 "for example name: worker")


def test_the_filter_adds_what_the_plans_refuse_and_never_raises():
    assert declaration_problems([GOOD], app="shop") == []
    assert declaration_problems([GOOD], app="Shop")[0].startswith('sturdy_app="Shop" cannot name units')
    twice = declaration_problems([GOOD, GOOD], app="shop")
    assert twice[0].startswith('sturdy_processes[].name="worker" is declared more than once')
    assert declaration_problems([{**GOOD, "command": ["../x"]}], app="shop")[0].startswith(
        "sturdy_processes[worker].command[0]:")
    defaults = {"restart": "on-failure", "restart_sec": 2, "restart_steps": 0, "restart_max_delay": 2,
                "start_limit_burst": 5, "stop_timeout": 30, "stop_margin": 10, "max_instances": 32,
                "environment_files": [], "read_write_paths": [], "working_directory": None, "singleton_here": True,
                "max_deliveries": 5}
    # What the worker role's plan refuses, with the host's systemd: a singleton of two instances.
    two = [{**GOOD, "singleton": True}]
    assert declaration_problems(two, app="shop") == []
    assert declaration_problems(two, app="shop", defaults=defaults, systemd_version=257) == [
        "sturdy_processes[worker]: singleton process types run one instance; set instances: 1 or drop singleton"]
    # A stop timeout shorter than the longest task.
    short = [{**GOOD, "stop_timeout": 30, "max_task_runtime": 60}]
    assert declaration_problems(short, app="shop", defaults=defaults, systemd_version=252)[0].startswith(
        "sturdy_processes[worker].stop_timeout=30s is shorter than max_task_runtime (60s)")
