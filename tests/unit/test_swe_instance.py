"""Loading instances in the published SWE-bench / SWE-Gym schema."""

from __future__ import annotations

import json

import pytest

from tasks.errors import MalformedRow
from tasks.swe.instance import DEFAULT_TEST_CMD, SdistSource, load_instances, parse_row
from tests.swe_support import row


def test_published_row_with_json_encoded_lists():
    instance = parse_row(row())
    assert instance.fail_to_pass == ("tests/test_core.py::test_new",) and instance.pass_to_pass == ()
    assert instance.clone_name == "owner__name" and instance.source.type == "git"
    assert instance.install == ("pytest",)
    assert instance.test_files() == ["tests/test_core.py", "tests/data/fixture.json"]
    assert instance.command() == f"{DEFAULT_TEST_CMD} tests/test_core.py"


def test_lists_and_our_optional_fields():
    instance = parse_row(
        row(
            FAIL_TO_PASS=["a.py::t"],
            PASS_TO_PASS=["a.py::u"],
            test_cmd="python -m pytest -x a.py",
            install='["pytest==8.3.4"]',
            source={"type": "sdist", "package": "toolz", "version": "0.12.1"},
        )
    )
    assert instance.pass_to_pass == ("a.py::u",) and instance.command() == "python -m pytest -x a.py"
    assert instance.install == ("pytest==8.3.4",)
    assert isinstance(instance.source, SdistSource) and instance.source.requirement == "toolz==0.12.1"


def test_declared_plugins_are_the_only_ones_the_test_run_loads():
    from tasks.swe.grader import isolated_environment

    plain = parse_row(row())
    assert plain.plugins == ()
    assert isolated_environment(plain) == {
        "PYTHONSAFEPATH": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONPYCACHEPREFIX": "/tmp/gym-pycache",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    with_plugins = parse_row(row(plugins='["xdist.plugin", "hypothesis.extra.pytestplugin"]'))
    assert isolated_environment(with_plugins)["PYTEST_ADDOPTS"] == "-p xdist.plugin -p hypothesis.extra.pytestplugin"


def test_nulls_take_defaults_and_setup_commit_falls_back_to_base():
    instance = parse_row(row(environment_setup_commit=None, hints_text=None, test_cmd=None, install=None))
    assert instance.environment_setup_commit == "a" * 40 and instance.hints_text == ""
    assert instance.test_cmd is None and instance.install == ("pytest",)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"FAIL_TO_PASS": "[not json"}, "FAIL_TO_PASS"),
        ({"FAIL_TO_PASS": "[]"}, "FAIL_TO_PASS"),  # nothing to fail-to-pass: not a task
        ({"PASS_TO_PASS": json.dumps({"a": 1})}, "PASS_TO_PASS"),
        ({"repo": "no-slash"}, "repo"),
        ({"base_commit": "not-a-sha"}, "base_commit"),
        ({"test_patch": ""}, "test_patch"),
        ({"source": {"type": "svn"}}, "source"),
        ({"plugins": ["x; rm -rf /"]}, "plugins"),  # an import name, never shell text
    ],
)
def test_malformed_rows_name_the_field(overrides, field):
    with pytest.raises(MalformedRow, match=f"field '{field}"):
        parse_row(row(**overrides))


def test_missing_field_is_named():
    data = row()
    del data["problem_statement"]
    with pytest.raises(MalformedRow, match="problem_statement"):
        parse_row(data)


def test_jsonl_loader_skips_bad_rows(tmp_path):
    path = tmp_path / "instances.jsonl"
    rows = [row(), row(instance_id="x-2", FAIL_TO_PASS="oops"), row(), row(instance_id="x-3")]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    loaded = load_instances(path)
    assert [i.instance_id for i in loaded.instances] == ["owner__name-1", "x-3"]
    reasons = {e.index: e.reason for e in loaded.errors}
    assert set(reasons) == {1, 2, 4}
    assert "FAIL_TO_PASS" in reasons[1] and "duplicate" in reasons[2] and "JSON" in reasons[4]


def test_parquet_through_datasets(tmp_path):
    datasets = pytest.importorskip("datasets", reason="parquet rows load through the datasets library")
    path = tmp_path / "instances.parquet"
    rows = [row(), row(instance_id="x-2", environment_setup_commit=None)]
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    loaded = load_instances(path)
    assert [i.instance_id for i in loaded.instances] == ["owner__name-1", "x-2"]
    assert loaded.instances[1].environment_setup_commit == "a" * 40


def test_row_round_trip():
    instance = parse_row(row(test_cmd="pytest"))
    again = parse_row(json.loads(json.dumps(instance.row())))
    assert again == instance
    assert isinstance(instance.row()["FAIL_TO_PASS"], str)  # published shape: JSON-encoded
