"""`python -m gym tokenizer train|info`: build the default BPE tokenizer, or describe a tokenizer.

``train`` writes build/tokenizer/tokenizer.json (or ``--out``) and prints its
SHA-256: the same config gives the same hash. ``info SPEC`` prints, as JSON,
the name, vocabulary size, fingerprint and special-token ids of a tokenizer
spec (``bpe``, ``bpe:PATH``, ``hf:DIR``, ``o200k_harmony``), and the ids of
``--text`` when given.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from gym.cli import HELP_FORMATTER, epilog


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    from gym.format.bpe import DEFAULT_PATH, BpeConfig

    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    train = actions.add_parser(
        "train",
        help="train the default byte-level BPE (deterministic)",
        epilog=epilog(("", "--out /tmp/tok/tokenizer.json --vocab-size 4096")),
        formatter_class=HELP_FORMATTER,
    )
    train.add_argument(
        "--out", type=Path, default=DEFAULT_PATH, help=f"tokenizer.json to write (default: {DEFAULT_PATH})"
    )
    train.add_argument("--vocab-size", type=int, default=BpeConfig().vocab_size, help="total ids, specials included")
    info = actions.add_parser(
        "info",
        help="describe a tokenizer as JSON",
        epilog=epilog(("", "bpe --text 'def f(x):'", "o200k_harmony", "hf:/path/to/model_dir")),
        formatter_class=HELP_FORMATTER,
    )
    info.add_argument("spec", nargs="?", default="bpe", help="bpe | bpe:PATH | hf:DIR | o200k_harmony (default bpe)")
    info.add_argument("--text", default=None, help="also print the ids of this text")


def run(args: argparse.Namespace) -> int:
    if args.action == "train":
        from gym.format.bpe import BpeConfig, write_bpe

        path = write_bpe(args.out, BpeConfig(vocab_size=args.vocab_size))
        print(f"{path}  sha256={hashlib.sha256(path.read_bytes()).hexdigest()}")
        return 0
    from gym.format.tokenizer import TokenizerUnavailable, describe, load_tokenizer

    try:
        tokenizer = load_tokenizer(args.spec)
    except TokenizerUnavailable as exc:
        print(json.dumps({"spec": args.spec, "available": False, "reason": str(exc)}, indent=2))
        return 1
    summary = {"spec": args.spec, "available": True, **describe(tokenizer)}
    if args.text is not None:
        summary["ids"] = tokenizer.encode(args.text)
    print(json.dumps(summary, indent=2))
    return 0
