"""TRL drives our reward (issue 44 item 2): two real ``GRPOTrainer`` steps of a tiny RDEP policy on the CPU
(trainer/bench.py's set-up: the same GRPOConfig, a tokenizer trained here), on a verl-shaped dataset of one math and
one code row. TRL calls `gym.integrations.trl.GymReward` with the sampled completions and the dataset's columns; it
returns the graders' verdicts (the real math check, programs compiled and run by the real grader), and TRL logs
them under the reward's name."""

from __future__ import annotations

import json

import pytest

from gym.integrations.scorer import Scorer, ScorerConfig
from gym.integrations.trl import GymReward
from tests.policy_support import small_model
from tests.tokenizer_support import train_tokenizer

pytestmark = [pytest.mark.slow, pytest.mark.docker]

ROWS = [
    {
        "prompt": "What is 6 times 12? End with #### N.",
        "data_source": "openai/gsm8k",
        "reward_model": {"style": "rule", "ground_truth": "72"},
        "extra_info": {"split": "train", "index": 0},
    },
    {
        "prompt": "Read a and b, print a + b.",
        "data_source": "taco",
        "reward_model": {"style": "rule", "ground_truth": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})},
        "extra_info": {"split": "train", "index": 1},
    },
]


class RecordedReward(GymReward):
    """Our reward as TRL sees it, remembering each call."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[list, dict, list]] = []

    def __call__(self, prompts, completions, **columns):
        rewards = super().__call__(prompts, completions, **columns)
        self.calls.append((list(completions), columns, list(self.last)))
        return rewards


def test_two_grpo_steps_call_our_reward_with_real_completions(tmp_path):
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(train_tokenizer(tmp_path / "tokenizer.json")))
    tokenizer.pad_token, tokenizer.eos_token = "<|end|>", "<|return|>"
    model = small_model(vocab_size=len(tokenizer), max_position_embeddings=256)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    config = ScorerConfig.model_validate({"sandbox": {"pool": {"size": 0}, "episode": {"wall_s": 3600.0}}})
    with Scorer(config) as scorer:
        reward = RecordedReward(scorer=scorer)
        grpo = trl.GRPOConfig(  # bench trainer's settings where a test needs them; TRL's defaults elsewhere
            output_dir=str(tmp_path / "out"),
            use_cpu=True,
            bf16=False,
            report_to="none",
            save_strategy="no",
            seed=0,
            max_steps=2,
            logging_steps=1,
            per_device_train_batch_size=4,
            num_generations=2,
            max_completion_length=12,
            beta=0.0,
            shuffle_dataset=False,  # each step: the two rows, two completions each
        )
        trainer = trl.GRPOTrainer(
            model=model,
            reward_funcs=[reward],
            args=grpo,
            train_dataset=datasets.Dataset.from_list(ROWS * 4),
            processing_class=tokenizer,
        )
        trainer.train()
        # the control: the same reward object passes a right answer, so the zeros above are verdicts, not a default
        assert reward(["p"], ["#### 72"], **{key: [ROWS[0][key]] for key in ROWS[0] if key != "prompt"}) == [1.0]
    assert len(reward.calls) == 3  # two training steps, then the control
    for completions, columns, scores in reward.calls[:2]:
        assert len(completions) == 4 and all(isinstance(c, str) for c in completions)
        assert sorted(columns["data_source"]) == ["openai/gsm8k", "openai/gsm8k", "taco", "taco"]
        assert all(isinstance(m, dict) and "ground_truth" in m for m in columns["reward_model"])
        # what the graders said: no sample refused or masked, each a grader's verdict with its reward
        assert all(s.verdict not in ("refused", "infra_error") and s.reward in (0.0, 1.0) for s in scores), scores
    logged = [h for h in trainer.state.log_history if "rewards/code_rl_gym/mean" in h]
    assert len(logged) == 2
