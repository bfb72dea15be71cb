from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sturdy.workers.plugins.filter.app_plan import FilterModule as AppPlan
from ansible_collections.sturdy.workers.plugins.filter.worker_plan import FilterModule


def test_filter_is_registered_and_plans_the_app_plans_processes():
    worker_plan = FilterModule().filters()["worker_plan"]
    app_plan = AppPlan().filters()["app_plan"]
    defaults = {
        "environment_files": [], "read_write_paths": [], "restart": "on-failure", "restart_sec": 5,
        "restart_steps": 5, "restart_max_delay": 300, "start_limit_burst": 5, "stop_timeout": 90, "stop_margin": 30,
    }
    processes = app_plan("shop", processes=[{"name": "w", "command": ["/bin/w"]}])["processes"]
    (proc,) = worker_plan(processes, defaults, "257")
    assert proc["units"] == ["shop-w@1.service"] and proc["exec_start"] == "/bin/w"


def test_filter_errors_are_filter_errors_naming_the_process():
    worker_plan = FilterModule().filters()["worker_plan"]
    with pytest.raises(AnsibleFilterError, match=r"cannot plan the units: sturdy_processes\[w\]\.command"):
        worker_plan([{"name": "w", "command": ["w"], "units": [], "description": "w"}], {"stop_margin": 0}, 257)
