from __future__ import annotations

import json

from ansible_collections.sturdy.workers.plugins.filter.history_lines import history_lines
from ansible_collections.sturdy.workers.plugins.module_utils import history


def entry(run, host, result="success", **extra):
    return {"run": run, "kind": "deploy", "host": host, "who": "alice@ctl", "started": 1000.0, "from": "b1",
            "to": "b2", "result": result, "summary": "deploy shop b2: success in 40s", **extra}


def test_entries_are_appended_as_lines_and_read_back_newest_last(tmp_path):
    path = str(tmp_path / "history.jsonl")
    assert history.read(path) == []
    assert history.append(path, entry("deploy-1", "w1", finished=1040.0))
    first = (tmp_path / "history.jsonl").read_bytes()
    assert history.append(path, entry("restart-2", "w1", finished=2000.0, kind="restart", secret="x"))
    # Append-only: the first line is still the file's first bytes.
    assert (tmp_path / "history.jsonl").read_bytes().startswith(first)
    got = history.read(path)
    assert [e["run"] for e in got] == ["deploy-1", "restart-2"]
    # Only the known fields are kept.
    assert "secret" not in got[1] and got[1]["kind"] == "restart" and got[1]["finished"] == 2000.0
    assert (tmp_path / "history.jsonl").stat().st_mode & 0o777 == 0o644


def test_check_mode_or_a_missing_root_writes_nothing(tmp_path):
    path = str(tmp_path / "history.jsonl")
    assert not history.append(path, entry("deploy-1", "w1"), check=True)
    assert not history.append(str(tmp_path / "gone" / "history.jsonl"), entry("deploy-1", "w1"))
    assert not (tmp_path / "history.jsonl").exists() and not (tmp_path / "gone").exists()


def test_the_last_entries_are_read_from_the_end_and_a_cut_line_is_skipped(tmp_path):
    path = tmp_path / "history.jsonl"
    lines = [json.dumps(entry(f"run-{n}", "w1", finished=float(n))) for n in range(500)]
    # A crash cut the last write short.
    path.write_text("\n".join(lines) + "\n" + '{"run": "cut-sh')
    got = history.read(str(path), last=3, chunk=100)
    assert [e["run"] for e in got] == ["run-497", "run-498", "run-499"]
    assert [e["run"] for e in history.read(str(path), last=1000)][:2] == ["run-0", "run-1"]


def test_a_summary_is_one_line_and_cut():
    line = json.loads(history.entry_line({"run": "r", "summary": "a\nb  " + "x" * 1000}, now=5.0))
    assert line["summary"].startswith("a b x") and len(line["summary"]) == history.SUMMARY_CHARS
    assert line["finished"] == 5.0


def test_one_line_per_run_newest_first_naming_a_run_some_hosts_did_not_record():
    lines = history_lines({
        "w1": [entry("deploy-1", "w1", finished=1040.0), entry("restart-2", "w1", kind="restart", started=1900.0,
                                                               finished=1930.0, summary="")],
        "w2": [entry("deploy-1", "w2", finished=1042.0)],
    })
    assert lines == [
        "1970-01-01 00:32:10 UTC  restart b1 -> b2: success in 30s, by alice@ctl, ONLY on w1 (not on w2)",
        "1970-01-01 00:17:22 UTC  deploy b1 -> b2: success in 42s, by alice@ctl, 2 host(s) - deploy shop b2: "
        "success in 40s",
    ]
    assert len(history_lines({"w1": [entry(f"r{n}", "w1", finished=float(2000 + n)) for n in range(30)]}, last=5)) == 5


def test_hosts_that_differ_are_each_named_and_awx_is_credited():
    [line] = history_lines({
        "w1": [entry("deploy-1", "w1", finished=1040.0, awx_job="77", awx_user="bob")],
        "w2": [entry("deploy-1", "w2", result="rolled_back", finished=1050.0, to="b1", awx_job="77",
                     awx_user="bob")],
    }, hosts=["w1", "w2", "w3"])
    assert "deploy b1 -> b2 on w1; b1 -> b1 on w2: success on w1; rolled_back on w2 in 50s" in line
    assert "by alice@ctl (AWX job 77 by bob), ONLY on w1, w2 (not on w3)" in line


def test_no_run_recorded_and_a_host_not_read_are_each_said():
    assert history_lines({"w1": [], "w2": []}, unread=["w3"]) == [
        "No deploy, rollback or restart is recorded on w1, w2 (the history starts with the first run of a collection "
        "version that writes it).",
        "NOT READ: w3 (unreachable or failed): their runs are missing above."]


def test_a_release_of_the_live_build_is_a_config_run_or_a_scale_naming_the_instances():
    config = {"w1": [entry("c-1", "w1", finished=1010.0, **{"from": "b2", "to": "b2~2"})]}
    assert history_lines(config)[0].startswith("1970-01-01 00:16:50 UTC  config b2 -> b2~2: success")
    scale = {host: [entry("s-1", host, finished=1020.0, units_started=["shop-worker@3.service"],
                          **{"from": "b2~2", "to": "b2~3"})] for host in ("w1", "w2")}
    assert "  scale (2 instance(s) started) b2~2 -> b2~3: success" in history_lines(scale)[0]
    scale["w1"][0].update(units_started=[], units_stopped=["shop-worker@3.service", "shop-worker@4.service"])
    scale["w2"][0].update(units_started=[], units_stopped=["shop-worker@3.service"])
    assert "  scale (3 instance(s) stopped) b2~2 -> b2~3" in history_lines(scale)[0]
    # A new build, or the same release deployed again, stays a deploy.
    assert "  deploy b2~3 -> b3: " in history_lines({"w1": [entry("d", "w1", **{"from": "b2~3", "to": "b3"})]})[0]
    assert "  deploy b3 -> b3: " in history_lines({"w1": [entry("d", "w1", **{"from": "b3", "to": "b3"})]})[0]
    # What a host records: the lists, only when not empty.
    line = json.loads(history.entry_line(entry("s-1", "w1", units_started=["shop-worker@3.service"],
                                               units_stopped=[])))
    assert line["units_started"] == ["shop-worker@3.service"] and "units_stopped" not in line
