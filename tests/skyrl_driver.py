"""Run inside a venv holding skyrl-gym (tests/integration/test_integrations_skyrl.py): SkyRL-Gym's own registry
builds our env for each sample as SkyRL's generator does (``skyrl_gym.make(env_class, env_config=..., extras=row)``,
then ``init`` and ``step``), and this prints each step's outcome as one JSON object.

``python -m tests.skyrl_driver`` with the checkout on PYTHONPATH.
"""

from __future__ import annotations

import json

ADD = json.dumps({"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]})
SAMPLES = {  # name: (data_source, ground truth, action)
    "honest program": ("taco", ADD, "```python\na, b = map(int, input().split())\nprint(a + b)\n```"),
    "forged PASSED": ("taco", ADD, "print('PASSED')"),
    "sys.exit(0)": ("taco", ADD, "import sys\nsys.exit(0)"),
    "honest math": ("openai/gsm8k", "72", "6 * 12 = 72\n#### 72"),
    "hedged math": ("openai/gsm8k", "72", "\\boxed{71} or \\boxed{72}"),
    "malformed ground truth": ("taco", "{inputs: [1]}", "print(3)"),
}


def main() -> None:
    import skyrl_gym
    from omegaconf import OmegaConf

    from gym.integrations.skyrl import ENV_CLASS, register

    register()
    register()  # twice, as two entrypoints in one process would: one registration
    out = {"registered": ENV_CLASS in skyrl_gym.registry}
    for name, (source, truth, action) in SAMPLES.items():
        row = {
            "data_source": source,
            "env_class": ENV_CLASS,
            "reward_spec": {"method": "rule", "ground_truth": truth},
            "extra_info": {"split": "test", "index": 0},
        }
        env = skyrl_gym.make(ENV_CLASS, env_config=OmegaConf.create({}), extras=row)
        prompt, _ = env.init([{"role": "user", "content": "question"}])
        step = env.step(action)
        out[name] = {"reward": step["reward"], "done": step["done"], **step["metadata"], "metrics": env.get_metrics()}
        env.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
