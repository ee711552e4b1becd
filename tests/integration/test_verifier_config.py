"""`python -m gym verifier CONFIG`: the shipped config validates, typos and bad files are one-line errors
with their exit code (docs/cli.md), all before the run directory is touched; the held-out side never shares
a problem with the training side; unscored steps carry no loss."""

from __future__ import annotations

import json

import pytest
import yaml

from gym.format.tokenizer import load_tokenizer
from gym.format.verifier import VerifierFormat
from tasks.step_labels import LabelScheme, read_step_rows
from tasks.step_samples import generate_rows, write_rows
from tests.cli_support import ROOT, gym, one_line
from trainer.errors import ConfigError
from trainer.verifier_train import ArithmeticRows, VerifierConfig, collate, render_all, splits

SHIPPED = ROOT / "configs" / "verifier_tiny.yaml"


def test_the_shipped_config_validates():
    config = VerifierConfig.load(SHIPPED)
    assert isinstance(config.train, ArithmeticRows) and config.heldout is None
    assert config.policy.type == "rdep_moe" and config.label_texts.correct == " +"


def _write(tmp_path, **changes) -> str:
    data = yaml.safe_load(SHIPPED.read_text())
    data.update(changes)
    data["out"] = str(tmp_path / "run")
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"stpes": 3}, "stpes: Extra inputs are not permitted"),
        ({"lr": -1}, "lr: Input should be greater than 0"),
        ({"train": {"type": "jsonl", "pth": "x.jsonl"}}, "train.pth"),
        ({"train": {"type": "csv", "path": "x"}}, "train"),
        ({"labels": {"scheme": "prm800"}}, "labels.scheme"),
        ({"heldout_fraction": 1.5}, "heldout_fraction"),
    ],
)
def test_typos_are_one_line_errors(tmp_path, changes, words):
    """One line per problem, each naming the file and the field's dotted path."""
    path = _write(tmp_path, **changes)
    with pytest.raises(ConfigError) as caught:
        VerifierConfig.load(path)
    message = str(caught.value)
    assert words in message and all(line.startswith(f"{path}: ") for line in message.splitlines()), message
    assert "Traceback" not in message


def test_cli_typo_exits_2_before_the_run_directory(tmp_path):
    done = gym("verifier", _write(tmp_path, batchsize=3))
    one_line(done, 2, "batchsize")
    assert not (tmp_path / "run").exists()


def test_cli_missing_rows_file_exits_5(tmp_path):
    done = gym("verifier", _write(tmp_path, train={"type": "jsonl", "path": str(tmp_path / "none.jsonl")}))
    one_line(done, 5, "none.jsonl")


def test_cli_label_of_several_tokens_exits_2(tmp_path):
    done = gym("verifier", _write(tmp_path, label_texts={"correct": " definitely right", "wrong": " -"}))
    one_line(done, 2, "exactly one token")


@pytest.mark.slow  # two runs of the command: 36 s on the loaded 2-core VM
def test_cli_run_writes_its_files_prints_the_table_and_sets_an_earlier_run_aside(tmp_path):
    path = _write(tmp_path, train={"type": "arithmetic", "count": 100, "seed": 0}, eval_every=1)
    for _ in range(2):
        done = gym("verifier", path, "--steps", "2")
        assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "run"
    for name in ("config.json", "metrics.json", "checkpoint/model.safetensors", "checkpoint/verifier.json"):
        assert (run / name).is_file(), name
    assert "verifier " in done.stdout and "constant (majority label)" in done.stdout and "AUC" in done.stdout
    assert "Traceback" not in done.stderr
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["steps"] == 2 and [point["step"] for point in metrics["curve"]] == [1, 2]
    assert json.loads((run / "config.json").read_text())["steps"] == 2
    assert len(list(tmp_path.glob("run.*"))) == 1  # the first run, moved aside whole


def test_a_heldout_file_loses_the_rows_whose_problem_is_trained_on(tmp_path):
    rows = generate_rows(200, seed=0)
    write_rows(rows[:150], tmp_path / "train.jsonl")
    write_rows(rows[100:], tmp_path / "held.jsonl")
    config = VerifierConfig.model_validate(
        {
            **yaml.safe_load(SHIPPED.read_text()),
            "out": str(tmp_path / "run"),
            "train": {"type": "jsonl", "path": str(tmp_path / "train.jsonl")},
            "heldout": {"type": "jsonl", "path": str(tmp_path / "held.jsonl")},
        }
    )
    train, held, report = splits(config)
    trained = {row.problem for row in train}
    overlap = sum(1 for row in rows[100:] if row["problem"] in trained)
    assert len(train) == 150 and overlap >= 50  # rows 100..149 are in both files
    assert report["heldout_overlap_dropped"] == overlap and len(held) == 100 - overlap
    assert not trained & {row.problem for row in held}


def test_unscored_steps_stay_in_the_input_but_carry_no_loss():
    rows = read_step_rows(
        [json.dumps({"id": "p", "problem": "q", "steps": ["a", "b", "c"], "labels": [0, -1, 1]})],
        LabelScheme(scheme="prm800k", neutral="unscored"),
    ).rows
    fmt = VerifierFormat(load_tokenizer("bpe"))
    kept, dropped = render_all(fmt, rows, 1024)
    batch = collate(kept, "cpu")
    assert dropped == 0 and batch["mask"].tolist() == [[False, True, True]]
    assert batch["labels"].tolist()[0][1:] == [0, 1] and batch["positions"].tolist() == [kept[0].positions]
    all_unscored = rows[0].model_copy(update={"labels": (None, None, None)})
    assert render_all(fmt, [all_unscored], 1024) == ([], 1)
