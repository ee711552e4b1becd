"""Adapters that let other trainers use the gym's sandboxes and graders (docs/integrations.md).

Each adapter is one module that maps its library's call onto `gym.integrations.scorer.Scorer`, which does the
work: `tasks.grader.Grader` for programs in a fresh Docker sandbox, `tasks.math.grader.MathGrader` for math
answers: verl (`verl`), TRL (`trl`), verifiers (`verifiers`), SkyRL-Gym (`skyrl`). Importing this package loads
none of them; `verifiers` and `skyrl` import their library, `verl` and `trl` need none.
"""
