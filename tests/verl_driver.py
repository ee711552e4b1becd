"""Run inside a venv holding verl (tests/integration/test_integrations_verl.py): verl's own code loads and calls our
reward functions, and this prints what verl computed as one JSON object.

``python -m tests.verl_driver TOKENIZER_JSON`` with the checkout on PYTHONPATH. verl loads
``pkg://gym.integrations.verl`` and the file ``gym/integrations/verl.py`` with its ``get_custom_reward_fn``, then
scores one batch (a DataProto of token ids, as the rollout hands it over) through three of its reward managers: the
legacy ``naive`` and ``batch`` managers and the reward loop's ``naive`` manager (``run_single``, which calls
``compute_score`` from executor threads, all samples at once).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf
from transformers import PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[1]
ADD = json.dumps({"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]})
SAMPLES = [  # data_source, response, ground truth
    ("taco", "```python\na, b = map(int, input().split())\nprint(a + b)\n```", ADD),
    ("taco", "print('PASSED')", ADD),
    ("openai/gsm8k", "6 * 12 = 72\n#### 72", "72"),
    ("lighteval/MATH", "\\boxed{71} or \\boxed{72}", "72"),
    ("codecontests", "print(3)", "{not json"),
]


def batch(tokenizer, samples=SAMPLES):
    """The samples (data_source, response, ground truth) as a DataProto: left-padded prompts, right-padded
    responses, their attention mask."""
    from verl import DataProto

    prompts = [tokenizer(f"question {i}")["input_ids"] for i in range(len(samples))]
    responses = [tokenizer(response)["input_ids"] for _, response, _ in samples]
    width_p, width_r = max(map(len, prompts)), max(map(len, responses))
    pad = tokenizer.pad_token_id
    prompt_ids = torch.tensor([[pad] * (width_p - len(p)) + p for p in prompts])
    response_ids = torch.tensor([r + [pad] * (width_r - len(r)) for r in responses])
    rows = [
        [0] * (width_p - len(p)) + [1] * (len(p) + len(r)) + [0] * (width_r - len(r))
        for p, r in zip(prompts, responses)
    ]
    mask = torch.tensor(rows)
    return DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": response_ids,
            "input_ids": torch.cat([prompt_ids, response_ids], dim=1),
            "attention_mask": mask,
        },
        non_tensors={
            "data_source": np.array([s for s, _, _ in samples], dtype=object),
            "reward_model": np.array([{"style": "rule", "ground_truth": t} for _, _, t in samples], dtype=object),
            "extra_info": np.array([{"split": "test", "index": i} for i in range(len(samples))], dtype=object),
        },
    )


def rewards(tensor: torch.Tensor, data) -> list[float]:
    """Each row's reward, at its last response token (where verl's managers put it)."""
    width = data.batch["prompts"].shape[-1]
    lengths = data.batch["attention_mask"][:, width:].sum(-1)
    return [float(tensor[i, int(n) - 1]) for i, n in enumerate(lengths)]


def main() -> None:
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager as LoopManager
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.workers.reward_manager import BatchRewardManager, NaiveRewardManager

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=sys.argv[1])
    tokenizer.pad_token = "<|end|>"
    loaded = {}
    as_module, as_file = "pkg://gym.integrations.verl", str(ROOT / "gym/integrations/verl.py")
    for path, name in ((as_module, "compute_score"), (as_file, "compute_score_batch")):
        function = {"path": path, "name": name, "reward_kwargs": {}}
        loaded[name] = get_custom_reward_fn(OmegaConf.create({"reward": {"custom_reward_function": function}}))
    data = batch(tokenizer)
    out = {"verl": __import__("verl").__version__}
    naive = NaiveRewardManager(tokenizer, num_examine=0, compute_score=loaded["compute_score"])(data, return_dict=True)
    out["naive"] = rewards(naive["reward_tensor"], data)
    out["naive_extra"] = {k: list(map(str, v)) for k, v in naive["reward_extra_info"].items()}
    batched = BatchRewardManager(tokenizer, num_examine=0, compute_score=loaded["compute_score_batch"])(
        data, return_dict=True
    )
    out["batch"] = rewards(batched["reward_tensor"], data)
    loop = LoopManager(OmegaConf.create({}), tokenizer, loaded["compute_score"])

    async def each():
        return await asyncio.gather(*(loop.run_single(data[i : i + 1]) for i in range(len(data))))

    results = loop.loop.run_until_complete(each())
    out["reward_loop"] = [r["reward_score"] for r in results]
    out["reward_loop_verdicts"] = [r["reward_extra_info"]["verdict"] for r in results]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
