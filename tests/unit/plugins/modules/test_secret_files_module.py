from __future__ import annotations

import json

from ansible_collections.sturdy.workers.plugins.module_utils.secret_delivery import layout
from ansible_collections.sturdy.workers.plugins.modules import secret_files


def where(tmp_path, delivery, names):
    plan = layout("shop", delivery, names)
    return json.loads(json.dumps(plan).replace('"/etc/', f'"{tmp_path}/etc/'))


def test_a_missing_group_is_only_named_in_check_mode(run_module, tmp_path):
    args = {"layout": where(tmp_path, "env_file", ["BROKER_URL"]), "values": {"BROKER_URL": "s3cret-value"},
            "group": "sturdy-no-such-group", "_ansible_check_mode": True}
    result, calls = run_module(secret_files, args, [])
    assert result["changed"] and result["written"][0] == "group sturdy-no-such-group" and calls == []
    assert not (tmp_path / "etc").exists()
    assert "s3cret-value" not in json.dumps(result)


def test_the_environment_file_is_written_for_an_existing_group_and_its_value_never_returned(run_module, tmp_path):
    (tmp_path / "etc").mkdir()
    plan = where(tmp_path, "env_file", ["BROKER_URL"])
    args = {"layout": plan, "values": {"BROKER_URL": "s3cret-value"}, "group": "root"}
    result, calls = run_module(secret_files, args, [])
    assert result["written"] == [plan["directory"], plan["env_file"]] and calls == []
    assert "s3cret-value" not in json.dumps(result)
    result, calls = run_module(secret_files, args, [])
    assert not result["changed"]
