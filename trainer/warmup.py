"""Supervised warm start on token-exact reference trajectories (before RL; optional).

Two demo sources:

* `reference_demos` runs the gym's `scripted:reference` policy through the real environment (real
  tool calls in real workspaces, graded in fresh containers) and keeps the submitted trajectories;
* `final_answer_demos` renders, for each task, the prompt followed by one final-channel answer
  holding the reference program in a python block (no tools, no Docker).

`warm_start` then takes `steps` AdamW steps of next-token cross-entropy on their sampled
tokens only (token mean over the batch, with the same gradient sync as the RL update, so it runs
under torchrun too).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence

import torch
from torch import nn

from gym.environment import Environment
from gym.format.message import Message
from gym.progress import progress as bar_of
from gym.rollout import collect_async
from gym.scripted import load_scripted
from gym.trajectory import Trajectory, TrajectoryBuilder
from tasks.families import kind_of
from tasks.task import Task
from trainer.batch import collate, shard
from trainer.config import WarmStartConfig
from trainer.sample import Sample
from trainer.selection import Scored
from trainer.update import GradientSync, empty_batch, score

log = logging.getLogger(__name__)


async def reference_demos(env: Environment, pool, tasks: int | None, seed: int, grader=None) -> list[Trajectory]:
    """Graded, unmasked, submitted trajectories of the scripted reference policy, one per task (by id).

    The script runs with an unbounded turn budget (a cut turn would leave it unable to read its own
    context); demos whose turns exceed the environment's per-turn budget are left out, so the policy
    never learns turns it would not be allowed to finish.
    """
    episode = env.config.episode
    roomy = Environment(
        env.config.model_copy(
            update={"episode": episode.model_copy(update={"max_tokens_per_turn": episode.max_total_tokens})}
        ),
        tokenizer=env.tokenizer,
    )
    engine = load_scripted("reference", roomy)
    chosen = TaskList(demo_tasks(roomy, tasks))
    trajectories, _ = await collect_async(roomy, engine, pool, len(chosen.tasks), 1, seed, stream=chosen, grader=grader)
    kept = [
        t
        for t in trajectories
        if not t.masked
        and t.reward is not None
        and t.end_reason == "submit"
        and longest_turn(t.sampled) <= episode.max_tokens_per_turn
    ]
    log.info(
        "warm start: %d reference trajectories (%d masked, unsubmitted or over the turn budget left out)",
        len(kept),
        len(trajectories) - len(kept),
    )
    return sorted(kept, key=lambda t: t.seeds.position or 0)


def demo_tasks(env: Environment, count: int | None) -> list[Task]:
    """Every task in id order, or the first ``count`` distinct tasks of the environment's task stream
    (its mixture weights and shuffles), so a few demos spread over sources the way training draws them."""
    return demo_draw(env, count)[0]


def demo_draw(env: Environment, count: int | None) -> tuple[list[Task], int]:
    """`demo_tasks` and the stream position just past the last one (0 when every task is a demo): RL starts
    there, so its first steps are not the tasks the warm start just learned (a pass rate measured over the
    first steps would be inflated by them)."""
    if count is None or count >= len(env.tasks):
        return [env.tasks[k] for k in sorted(env.tasks)], 0
    stream, seen, chosen = env.stream(), set(), []
    for _ in range(100 * len(env.tasks)):  # a bound: a zero-weight source never repeats forever
        _, task = stream.next()
        if task.task_id not in seen:
            seen.add(task.task_id)
            chosen.append(task)
            if len(chosen) == count:
                break
    return chosen, stream.position


class TaskList:
    """Each task once, in order: the `take` a rollout worker draws from (instead of the weighted stream)."""

    def __init__(self, tasks: Sequence[Task]) -> None:
        self.tasks = list(tasks)
        self.position = 0

    def take(self, n: int) -> list[tuple[int, Task]]:
        out = [(self.position + i, task) for i, task in enumerate(self.tasks[self.position : self.position + n])]
        self.position += len(out)
        return out


def final_answer_demos(env: Environment, tasks: int | None) -> list[Trajectory]:
    """Prompt + ``<|channel|>final<|message|>```python PROGRAM```<|return|>`` per task (a math task: its
    reference answer alone), token-exact; in a model family's chat format, its own answer turn."""
    programs = env.reference_programs()
    chosen = [task for task in demo_tasks(env, tasks) if task.task_id in programs]
    demos = []
    for task in chosen:
        reference = programs[task.task_id].rstrip()
        # as the task's family reads a final answer back: a code block (CP), the message itself (math)
        answer = Message.assistant("final", kind_of(task).demo_text(task, reference))
        chat_format = env.format_for(task)  # the environment's: Harmony, or the model family's own
        ids = chat_format.render_completion([answer])
        builder = TrajectoryBuilder.from_messages(chat_format, env.prompt(task), task_id=task.task_id)
        builder.add_sampled(ids, [0.0] * len(ids))
        demos.append(builder.build())
    max_turn = env.config.episode.max_tokens_per_turn
    kept = [d for d in demos if d.num_sampled <= max_turn]
    log.info(
        "warm start: %d final-answer demos (%d over the %d-token turn budget left out)",
        len(kept),
        len(demos) - len(kept),
        max_turn,
    )
    warning = memorised_pool(len(kept), tasks, len(env.tasks))
    if warning:
        log.warning("%s", warning)
    return kept


# demos over this share of the pool: RL draws mostly tasks the warm start taught (the main job: 96 of 168)
MEMORISED_SHARE = 0.75


def memorised_pool(demos: int, asked: int | None, pool: int) -> str | None:
    """The warning a run needs when its warm start covers much of the task pool (None when it does not): RL then
    trains, and measures its pass rate, on tasks whose reference the policy was just taught."""
    notes = []
    if asked is not None and demos < asked:
        notes.append(f"{demos} demos of the {asked} asked (only tasks with a reference solution become demos)")
    if pool and demos > MEMORISED_SHARE * pool:
        notes.append(
            f"the demos cover {demos} of the pool's {pool} tasks ({demos / pool:.0%}): RL will mostly draw tasks "
            "the warm start taught, and its pass rate overstates what the policy learned; give the warm start "
            "fewer tasks (warm_start.tasks) or the run a larger pool"
        )
    return "warm start: " + "; ".join(notes) if notes else None


def longest_turn(sampled: Sequence[bool]) -> int:
    """Longest run of sampled tokens (one assistant turn)."""
    best = run = 0
    for flag in sampled:
        run = run + 1 if flag else 0
        best = max(best, run)
    return best


def warm_start(
    model: nn.Module,
    demos: Sequence[Trajectory],
    config: WarmStartConfig,
    seed: int,
    sync: GradientSync | None = None,
    rank: int = 0,
    world_size: int = 1,
    temperature: float = 1.0,
    progress: bool = True,
) -> list[float]:
    """Run the supervised steps; returns the loss of each step (summed over ranks).

    ``progress``: a bar of steps on stderr (rank 0, a terminal only; gym/progress.py)."""
    if not demos:
        raise ValueError("warm start has no reference trajectories to learn from")
    sync = sync or GradientSync()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr)
    order = random.Random(seed)
    items = [Scored(sample=Sample(t), advantage=0.0) for t in demos]
    losses = []
    device = next(model.parameters()).device
    model.train()
    with bar_of(config.steps, "warm start", "step", enabled=progress and rank == 0) as bar:
        for step in range(config.steps):
            losses.append(
                _warm_step(
                    model,
                    optimizer,
                    sync,
                    order.sample(items, min(config.batch_size, len(items))),
                    rank,
                    world_size,
                    device,
                    temperature,
                )
            )
            bar.set_postfix({"loss": f"{losses[-1]:.4f}"}, refresh=False)
            bar.update(1)
            if step % 10 == 0 or step == config.steps - 1:
                log.debug("warm start step %d/%d: loss %.4f", step + 1, config.steps, losses[-1])
    log.info("warm start: %d steps, loss %.4f -> %.4f", config.steps, losses[0], losses[-1])
    _reset_router_loads(model)
    return losses


def _warm_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    sync: GradientSync,
    batch: list[Scored],
    rank: int,
    world_size: int,
    device: torch.device,
    temperature: float,
) -> float:
    """One supervised step on ``batch`` (every rank drew the same one); its loss summed over ranks."""
    mine = shard(batch, rank, world_size)
    tokens = float(sum(s.sample.num_sampled for s in batch))
    optimizer.zero_grad(set_to_none=True)
    micro = (collate(mine) if mine else empty_batch()).to(device)  # an idle rank still joins the RDEP exchanges
    scores = score(model, micro, temperature, replay=False)
    loss = -(scores.logprobs * micro.loss_mask).sum() / tokens
    loss.backward()
    sync.reduce_gradients(model)
    norm = sync.grad_norm(model)
    if norm > 1.0:
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(1.0 / (norm + 1e-6))
    optimizer.step()
    return float(sync.all_reduce(torch.tensor([float(loss.detach())]))[0])


def _reset_router_loads(model: nn.Module) -> None:
    for module in model.modules():
        load = getattr(module, "load", None)
        if isinstance(load, torch.Tensor) and hasattr(module, "update_bias"):
            load.zero_()
