from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

import ansible_collections.sturdy.workers as collection
from ansible_collections.sturdy.workers.plugins.filter.app_plan import FilterModule

app_plan = FilterModule().filters()["app_plan"]


def test_filter_takes_the_secrets_mapping_and_names_only():
    plan = app_plan("shop", secrets={"BROKER_URL": "redis://:pw@x"}, delivery="credentials")
    assert plan["secrets"]["credential_files"] == {"BROKER_URL": "/etc/shop/credentials/BROKER_URL"}
    assert "redis://" not in repr(plan)


def test_filter_treats_none_as_not_given():
    plan = app_plan("shop", build_id=None, root=None, processes=None, secrets=None, migrate_command=None)
    assert plan["root"] == "/srv/shop" and plan["release"] == "" and plan["processes"] == []


def test_filter_errors_are_filter_errors_naming_the_variable():
    with pytest.raises(AnsibleFilterError, match='app_plan: sturdy_app="Shop"'):
        app_plan("Shop")


def test_the_plan_names_the_agent_the_release_role_installs_by_its_sha256():
    # The worker units carry it: an agent that differs rewrites them, and a deploy restarts the instances onto it.
    from ansible_collections.sturdy.workers.plugins.module_utils.releases import agent_digest, agent_package

    assert app_plan("shop")["agent_digest"] == agent_digest(agent_package(collection.__path__[0]))
