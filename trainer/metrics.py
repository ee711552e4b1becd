"""Step metrics: JSONL always, TensorBoard (a dependency; on by default), W&B when configured, a progress bar.

Every record is one JSON line in ``RUN/metrics.jsonl`` (``{"step": N, "kind": "train", ...}``).
Optional sinks load lazily and are skipped with one log line when their package is missing.
The progress bar (tqdm, on stderr when it is a terminal) shows step, reward, tokens/s and staleness.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import math
from pathlib import Path
from typing import Any

from trainer.config import MetricsConfig

log = logging.getLogger(__name__)

# what the progress bar shows: metric key -> short label
PROGRESS_FIELDS = {"reward/mean": "reward", "perf/tokens_per_s": "tok/s", "staleness/mean": "stale", "loss": "loss"}


class MetricsLogger:
    """Sinks of one run (only rank 0 creates one with writing enabled)."""

    def __init__(
        self,
        run_dir: Path,
        config: MetricsConfig,
        total_steps: int,
        start_step: int = 0,
        enabled: bool = True,
        run_config: dict | None = None,
    ) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self.enabled = enabled
        self._tb = None
        self._wandb = None
        self._bar = None
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        if config.tensorboard:
            self._tb = _tensorboard_writer(Path(run_dir) / "tensorboard")
        if config.wandb_project:
            self._wandb = _wandb_run(config.wandb_project, run_config or {}, Path(run_dir))
        if config.progress:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total_steps, initial=start_step, desc="grpo", unit="step", dynamic_ncols=True, disable=None
            )  # none when stderr is not a terminal (logs, CI), as gym/progress.py

    def log(self, step: int, metrics: dict[str, Any], kind: str = "train") -> None:
        if not self.enabled:
            return
        record = {"step": step, "kind": kind, **{k: _plain(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(record, sort_keys=False) + "\n")
        self._file.flush()
        scalars = {f"{kind}/{k}": v for k, v in record.items() if isinstance(v, (int, float)) and k != "step"}
        if self._tb is not None:
            for key, value in scalars.items():
                self._tb.add_scalar(key, value, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)
        if self._bar is not None and kind == "train":
            self._bar.n = step
            self._bar.set_postfix(
                {
                    label: f"{metrics[key]:.3g}"
                    for key, label in PROGRESS_FIELDS.items()
                    if isinstance(metrics.get(key), (int, float))
                },
                refresh=False,
            )
            self._bar.refresh()

    def close(self) -> None:
        if not self.enabled:
            return
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
        if self._bar is not None:
            self._bar.close()


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no inf/nan
    return value


def _tensorboard_writer(directory: Path):
    for module in ("torch.utils.tensorboard", "tensorboardX"):
        root = module.split(".")[0] if module == "tensorboardX" else "tensorboard"
        if importlib.util.find_spec(root) is None:
            continue
        writer_cls = importlib.import_module(module).SummaryWriter
        log.info("TensorBoard events in %s", directory)
        return writer_cls(log_dir=str(directory))
    log.warning(
        "TensorBoard not installed (metrics.tensorboard is on): metrics go to metrics.jsonl only; "
        "`bash bin/setup` installs it, or set metrics.tensorboard: false"
    )
    return None


def _wandb_run(project: str, config: dict, run_dir: Path):
    if importlib.util.find_spec("wandb") is None:
        raise RuntimeError(f"metrics.wandb_project={project!r} is set but the wandb package is not installed")
    import wandb

    return wandb.init(project=project, config=config, dir=str(run_dir), name=run_dir.name)
