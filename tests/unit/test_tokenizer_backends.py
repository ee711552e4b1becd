"""Backend specifics: the default BPE is reproducible and trains on first use; hf and o200k loading rules."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest

from gym.cli import main
from gym.format import bpe
from gym.format.tokenizer import HARMONY_SPECIALS, TokenizerError, TokenizerUnavailable, load_tokenizer
from tests.tokenizer_support import build_hf_dir

SMALL = bpe.BpeConfig(vocab_size=1024, corpus_documents=1500)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_bpe_training_is_reproducible(tmp_path: Path) -> None:
    a = bpe.write_bpe(tmp_path / "a" / "tokenizer.json", SMALL)
    b = bpe.write_bpe(tmp_path / "b" / "tokenizer.json", SMALL)
    c = bpe.write_bpe(tmp_path / "c" / "tokenizer.json", SMALL.model_copy(update={"corpus_seed": 1}))
    assert sha(a) == sha(b)
    assert sha(a) != sha(c)  # the check can fail: other inputs, other file


def test_cli_train_writes_the_same_file_as_the_api(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli" / "tokenizer.json"
    assert main(["tokenizer", "train", "--out", str(out), "--vocab-size", "1024"]) == 0
    assert f"sha256={sha(out)}" in capsys.readouterr().out
    api = bpe.write_bpe(tmp_path / "api" / "tokenizer.json", bpe.BpeConfig(vocab_size=1024))
    assert sha(out) == sha(api)


def test_default_bpe_layout_and_compression() -> None:
    tokenizer = load_tokenizer("bpe")
    assert tokenizer.vocab_size == bpe.BpeConfig().vocab_size
    assert list(tokenizer.special_ids.values()) == list(range(len(HARMONY_SPECIALS)))
    code = "def main():\n    n = int(input())\n    values = list(map(int, input().split()))\n    print(max(values) - min(values))\n"
    assert len(code) / len(tokenizer.encode(code)) > 2.5  # measured 3.0 chars/token on this snippet


def test_default_bpe_is_trained_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "build" / "tokenizer" / "tokenizer.json"
    monkeypatch.setattr(bpe, "DEFAULT_PATH", target)
    with caplog.at_level(logging.INFO, logger="gym.format.bpe"):
        tokenizer = load_tokenizer("bpe")
    assert target.is_file() and "missing: training it now" in caplog.text
    assert tokenizer.fingerprint == sha(target)[:16]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gym.format.bpe"):
        assert load_tokenizer("bpe").fingerprint == tokenizer.fingerprint
    assert "training" not in caplog.text  # up to date: loaded, not retrained
    (target.parent / "tokenizer.json.stamp").write_text('{"corpus_version": 0}\n')
    with caplog.at_level(logging.INFO, logger="gym.format.bpe"):
        assert load_tokenizer("bpe").fingerprint == tokenizer.fingerprint  # same inputs, same ids
    assert "stale: training it now" in caplog.text
    with pytest.raises(TokenizerError, match="no such tokenizer file"):
        load_tokenizer(f"bpe:{tmp_path / 'missing.json'}")


def test_hf_directory_rules(tmp_path: Path) -> None:
    directory = build_hf_dir(tmp_path / "model")
    tokenizer = load_tokenizer(f"hf:{directory}")
    assert tokenizer.encode("hello")[0] != 0  # no BOS from the template: the renderer owns structure
    assert tokenizer.is_special(0)  # <s> stays a (non-Harmony) special: invalid inside a message body
    start = tokenizer.special("start")
    assert (
        start == json.loads((directory / "tokenizer.json").read_text())["added_tokens"][-1]["id"]
    )  # reused, not duplicated
    (tmp_path / "empty").mkdir()
    with pytest.raises(TokenizerError, match="no tokenizer.json"):
        load_tokenizer(f"hf:{tmp_path / 'empty'}")
    with pytest.raises(TokenizerError, match="unknown tokenizer"):
        load_tokenizer("sentencepiece:/x")


def test_o200k_is_never_downloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TIKTOKEN_ENCODINGS_BASE", str(tmp_path / "nowhere"))
    monkeypatch.setattr("gym.format.o200k.LOCAL_DIR", tmp_path / "cache")
    with pytest.raises(TokenizerUnavailable, match="never downloads"):
        load_tokenizer("o200k_harmony")
    assert main(["tokenizer", "info", "o200k_harmony"]) == 1
    assert json.loads(capsys.readouterr().out)["available"] is False
    # A file that is there but wrong is read locally and refused by its hash, not fetched.
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "o200k_base.tiktoken").write_text("aGVsbG8= 0\n")
    monkeypatch.setenv("TIKTOKEN_ENCODINGS_BASE", str(fake))
    with pytest.raises(TokenizerError, match="hash mismatch"):
        load_tokenizer("o200k_harmony")


@pytest.mark.slow
def test_hf_directory_saved_by_transformers_matches_transformers(tmp_path: Path) -> None:
    """A directory written by transformers' save_pretrained encodes like AutoTokenizer does."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer as Backend

    source = Backend.from_file(str(build_hf_dir(tmp_path / "src") / "tokenizer.json"))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=source, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(tmp_path / "saved")
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path / "saved", local_files_only=True)
    ours = load_tokenizer(f"hf:{tmp_path / 'saved'}")
    for text in ("def solve(n):\n    return n * 2\n", "héllo wörld 42 🙂", "the answer is <|call|>"):
        if "<|" not in text:  # transformers splits special-token text out; ours keeps it text (by design)
            assert ours.encode(text) == reference.encode(text, add_special_tokens=False)
        assert ours.decode(ours.encode(text)) == text


def test_gym_modules_never_import_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys, gym.format.harmony, gym.trajectory, gym.format.prompt, gym.format.o200k, gym.commands.tokenizer\n"
        "from gym.format.tokenizer import load_tokenizer\n"
        "load_tokenizer('bpe').encode('x')\n"
        "import openai_harmony\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])
