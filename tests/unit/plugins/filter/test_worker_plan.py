from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sturdy.workers.plugins.filter.worker_plan import FilterModule


def test_filter_is_registered_and_plans():
    worker_plan = FilterModule().filters()["worker_plan"]
    defaults = {
        "instances": 1, "user": "u", "group": "g", "environment": {}, "environment_files": [],
        "read_write_paths": [], "restart": "on-failure", "restart_sec": 5, "restart_steps": 5,
        "restart_max_delay": 300, "start_limit_burst": 5, "stop_timeout": 90, "stop_margin": 30,
    }
    (proc,) = worker_plan([{"name": "w", "command": ["/bin/w"]}], "shop", defaults, "257")
    assert proc["units"] == ["shop-w@1.service"]


def test_filter_errors_are_filter_errors_naming_the_app():
    worker_plan = FilterModule().filters()["worker_plan"]
    with pytest.raises(AnsibleFilterError, match=r"cannot plan the units of 'shop': sturdy_processes\[w\]\.command"):
        worker_plan([{"name": "w", "command": ["w"]}], "shop", {"stop_margin": 0, "instances": 1}, 257)
