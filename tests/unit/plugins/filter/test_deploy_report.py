from __future__ import annotations

from ansible_collections.sturdy.workers.plugins.filter.deploy_report import deploy_report

RUN = {"id": "r1", "owner": "ci@box", "started": 1000.0}


def host(name, before_inv="a", after_inv="b", failure=None, rolled_back=None):
    return {
        "inventory_hostname": name, "sturdy_app": "shop",
        "__sturdy_release_switch": {"changed": True, "previous": "1", "current": "2"},
        "__sturdy_deploy_marks": {"preflight": 1010.0, "install": 1030.0, "migrate": 1035.0, "restart": 1060.0},
        "__sturdy_deploy_before": {"units": {"shop-worker@1.service": {"NRestarts": "3", "InvocationID": before_inv}}},
        "__sturdy_deploy_after": {"units": {"shop-worker@1.service": {"NRestarts": "0", "InvocationID": after_inv,
                                                                      "ActiveState": "active"}}},
        "sturdy_smoke_test_instances": {"results": [{"instances": [
            {"unit": "shop-worker@1.service", "latency": 0.05, "answer": {"build_id": "2"}}]}]},
        **({"__sturdy_deploy_failure": failure} if failure else {}),
        **({"__sturdy_deploy_rolled_back": rolled_back} if rolled_back else {}),
    }


def test_success_report_has_builds_phases_restarts_and_latency():
    rep = deploy_report([host("h1")], RUN, "2", 1070.0)
    assert rep["result"] == "success" and rep["seconds"] == 70.0
    assert rep["phases"] == {"preflight": 10.0, "install": 20.0, "migrate": 5.0, "restart": 25.0, "finish": 10.0}
    inst = rep["hosts"]["h1"]["instances"]["shop-worker@1.service"]
    assert inst == {"nrestarts_before": "3", "nrestarts_after": "0", "restarted": True, "active": "active",
                    "smoke_build": "2", "smoke_latency": 0.05}
    assert rep["hosts"]["h1"]["from"] == "1" and rep["hosts"]["h1"]["to"] == "2"


def test_failure_and_rollback_are_reported():
    rep = deploy_report([host("h1", failure="h1: boom", rolled_back="1"), host("h2", after_inv="a")], RUN, "2",
                        1070.0)
    assert rep["result"] == "rolled_back" and rep["failures"] == ["h1: boom"]
    assert rep["hosts"]["h2"]["instances"]["shop-worker@1.service"]["restarted"] is False
    text = deploy_report([host("h1", failure="h1: boom")], RUN, "2", 1070.0, text=True)
    assert text[0].startswith("deploy shop 2: failed in 70.0s") and text[-1] == "FAILED: h1: boom"
