"""Adapters that let other trainers use the gym's sandboxes and graders (docs/integrations.md).

Each adapter is one module that maps its library's call onto `gym.integrations.scorer.Scorer`, which does the
work: `tasks.grader.Grader` for programs in a fresh Docker sandbox, `tasks.math.grader.MathGrader` for math
answers: verl (`verl`), TRL (`trl`), verifiers (`verifiers`), SkyRL-Gym (`skyrl`). NeMo-Gym (`nemo_gym`) is the
exception: a NeMo-Gym resources server that runs in NeMo-Gym's own environment (Python 3.12+) and reaches the
graders over HTTP, through `python -m gym sandbox-serve`'s ``/v1/grade``; it imports nothing of this project.
Importing this package loads none of them; `verifiers`, `skyrl` and `nemo_gym` import their library, `verl` and
`trl` need none.
"""
