"""Run inside a venv holding verl (tests/integration/test_sandbox_serve_verl.py): verl's own sandbox-fusion reward
path calls a real `gym sandbox-serve`, and this prints what verl computed as one JSON object.

``python -m tests.verl_sandbox_driver URL TOKENIZER_JSON``. verl's ``load_reward_manager`` is given
``reward.sandbox_fusion.url = URL/run_code`` as a verl config gives it; it wraps ``default_compute_score`` with that
URL, a semaphore and the memory limit, and its reward loop's naive manager scores one batch of token ids: each code
sample goes through ``verl.utils.reward_score.sandbox_fusion`` (one ``/run_code`` request per test case, from its
own thread pool). ``check_correctness`` is also called directly, for its per-case codes (True, False, -2 runtime
error, -3 timeout).
"""

from __future__ import annotations

import json
import sys

from omegaconf import OmegaConf
from transformers import PreTrainedTokenizerFast

from tests.verl_driver import batch

ADD = json.dumps({"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]})
CALL = json.dumps({"fn_name": "add", "inputs": ["1\n2", "5\n7"], "outputs": ["3", "12"]})
HONEST = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
SAMPLES = [  # data_source, response, ground truth
    ("codecontests", HONEST, ADD),  # 1.0
    ("taco", "```python\nprint(3)\n```", ADD),  # one case of two: 0.5
    ("apps", "```python\nwhile True:\n    pass\n```", ADD),  # both time out: 0.0
    ("codecontests", "```python\nraise SystemExit(1)\n```", ADD),  # runtime error: 0.0
    ("taco", "print('PASSED')", ADD),  # no code block: 0.0 before any request
    ("taco", "```python\ndef add(a, b):\n    return a + b\n```", CALL),  # verl's call wrapper: 1.0
]


def main() -> None:
    import asyncio

    from verl.trainer.ppo.reward import load_reward_manager
    from verl.utils.reward_score.sandbox_fusion.utils import check_correctness

    url, tokenizer_file = sys.argv[1], sys.argv[2]
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=tokenizer_file)
    tokenizer.pad_token = "<|end|>"
    config = OmegaConf.create(
        {
            "reward": {
                "reward_manager": {"source": "register", "name": "naive"},
                "sandbox_fusion": {"url": f"{url}/run_code", "max_concurrent": 8, "memory_limit_mb": 1024},
            }
        }
    )
    manager = load_reward_manager(config, tokenizer)
    data = batch(tokenizer, SAMPLES)

    async def each():
        return await asyncio.gather(*(manager.run_single(data[i : i + 1]) for i in range(len(data))))

    results = manager.loop.run_until_complete(each())
    out = {
        "verl": __import__("verl").__version__,
        "manager": type(manager).__name__,
        "scores": [r["reward_score"] for r in results],
    }
    cases = {}
    for name, code in (
        ("honest", "a, b = map(int, input().split())\nprint(a + b)"),
        ("wrong", "print(3)"),
        ("timeout", "while True:\n    pass"),
        ("crash", "raise SystemExit(1)"),
    ):
        codes, metadata = check_correctness(f"{url}/run_code", json.loads(ADD), code, timeout=10)
        cases[name] = {"codes": codes, "status": [m["status"] for m in metadata]}
    out["cases"] = cases
    print(json.dumps(out))


if __name__ == "__main__":
    main()
