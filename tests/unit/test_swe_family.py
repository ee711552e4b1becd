"""An SWE grade as the gym's TaskResult: per-test verdicts, F2P-weighted fraction, what was stripped."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.failure import Verdict
from tasks.swe.family import task_result
from tasks.swe.resolution import InstanceResult, StrippedPath, TestGroup

F2P, P2P = ("t.py::fix_a", "t.py::fix_b"), ("t.py::old_a", "t.py::old_b", "t.py::old_c", "t.py::old_d")


def result(status, f2p_ok=(), p2p_ok=(), **fields) -> InstanceResult:
    return InstanceResult(
        instance_id="i",
        resolved=status == "resolved",
        status=status,
        f2p=TestGroup(success=tuple(f2p_ok), failure=tuple(t for t in F2P if t not in f2p_ok)),
        p2p=TestGroup(success=tuple(p2p_ok), failure=tuple(t for t in P2P if t not in p2p_ok)),
        **fields,
    )


def test_resolved_passes_every_test():
    graded = task_result(result("resolved", F2P, P2P), F2P, P2P, f2p_weight=2.0)
    assert graded.passed and graded.fraction == 1.0 and not graded.infra_error
    assert [t.verdict for t in graded.tests] == [Verdict.PASSED] * 6
    assert [t.detail for t in graded.tests][:3] == [
        "FAIL_TO_PASS t.py::fix_a",
        "FAIL_TO_PASS t.py::fix_b",
        "PASS_TO_PASS t.py::old_a",
    ]


def test_fraction_weights_fail_to_pass():
    half_fix = task_result(result("unresolved", F2P[:1], P2P), F2P, P2P, f2p_weight=2.0)
    assert not half_fix.passed and half_fix.fraction == round((2 * 0.5 + 1.0) / 3, 6)
    broke_one = task_result(result("unresolved", F2P, P2P[:3]), F2P, P2P, f2p_weight=2.0)
    assert broke_one.fraction == round((2 * 1.0 + 0.75) / 3, 6) > half_fix.fraction
    assert [t.verdict for t in half_fix.tests].count(Verdict.WRONG_ANSWER) == 1


def test_invalid_and_unapplied_runs_are_worth_nothing_and_infra_is_masked():
    stripped = (StrippedPath(path="conftest.py", reason="pytest configuration or conftest"),)
    invalid = task_result(result("invalid", F2P, P2P, detail="log does not add up", stripped=stripped), F2P, P2P, 2.0)
    assert invalid.fraction == 0.0 and not invalid.passed
    assert "invalid" in invalid.detail and "conftest.py (pytest configuration or conftest)" in invalid.detail
    assert task_result(result("patch_apply_failed"), F2P, P2P, 2.0).fraction == 0.0
    infra = task_result(result("infra_error", detail="engine gone"), F2P, P2P, 2.0)
    assert infra.infra_error and not infra.passed


def test_swe_pools_load_jsonl_and_parquet_and_mix_with_cp(tmp_path):
    import json

    import datasets

    from gym.environment import Environment
    from gym.environment_config import EnvironmentConfig, EnvironmentConfigError
    from tasks.swe.instance import SweInstance
    from tests.swe_support import row

    rows = [row(), row(instance_id="owner__name-2")]
    (tmp_path / "swe.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    datasets.Dataset.from_list(
        [{k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in r.items()} for r in rows]
    ).to_parquet(str(tmp_path / "swe.parquet"))
    root = Path(__file__).resolve().parents[2]
    for pool in (
        {"type": "jsonl", "path": str(tmp_path / "swe.jsonl"), "format": "swe"},
        {"type": "hf", "path": str(tmp_path / "swe.parquet"), "format": "swe"},
    ):
        env = Environment(
            EnvironmentConfig.from_dict(
                {
                    "name": "mix",
                    "task_pool": {
                        "type": "mixture",
                        "sources": [
                            {"weight": 1, "pool": pool},
                            {
                                "weight": 1,
                                "pool": {
                                    "type": "jsonl",
                                    "path": str(root / "tasks/samples/taco.jsonl"),
                                    "format": "taco",
                                    "id_prefix": "taco/",
                                },
                            },
                        ],
                    },
                }
            )
        )
        swe = [t for t in env.tasks.values() if isinstance(t, SweInstance)]
        assert [t.task_id for t in swe] == ["owner__name-1", "owner__name-2"], pool["type"]
        assert len(env.tasks) > len(swe)
        assert env.reference_programs()["owner__name-1"] == rows[0]["patch"]
        assert "checked out at /workspace/repo" in env.prompt(swe[0])[2].content
    with pytest.raises(EnvironmentConfigError, match="id_prefix is not supported"):
        Environment(
            EnvironmentConfig.from_dict(
                {
                    "name": "x",
                    "task_pool": {
                        "type": "jsonl",
                        "path": str(tmp_path / "swe.jsonl"),
                        "format": "swe",
                        "id_prefix": "p/",
                    },
                }
            )
        )
