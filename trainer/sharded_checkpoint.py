"""Sharded checkpoints with ``torch.distributed.checkpoint`` (DCP), and export to a Hugging Face directory.

`trainer.checkpoint.Checkpointer` takes this path when the model holds DTensor parameters (FSDP2's
``fully_shard``): each rank writes the shards it owns (``__R_I.distcp``, rank 0 also ``.metadata``) into the
same ``step_N.tmp`` directory the other formats use, so the rename into place, the ``latest`` pointer and what
a crash leaves behind stay as they are. Model and optimizer state go through
``torch.distributed.checkpoint.state_dict.get_state_dict / set_state_dict``.

Routed experts (RDEP) are plain tensors holding experts ``[first, first + count)`` of their layer on each rank.
DCP takes a plain tensor for a replicated one and writes a single rank's copy, which would silently keep one
rank's experts for all; so every expert is stored under a key of its own (``...experts.w_up.expert_3``, its
Adam moments likewise), whatever rank holds it. A checkpoint therefore reads the same in any expert layout,
and in one process without a process group (`read_checkpoint`, what ``python -m gym export`` uses).

DCP has no checksums: a flipped byte loads as a wrong weight. Every file of the checkpoint but the ones rank 0
writes last (``state.json``, ``config.json``) is hashed when saved (``digests.json``, the work spread over
ranks) and checked before it is read; a missing, truncated or altered file raises `CheckpointError` on every
rank at once, never a hang in the next collective.

`export_hf` writes a model directory ``transformers.AutoModelForCausalLM.from_pretrained`` loads: full tensors
gathered one at a time (``DTensor.full_tensor``; expert shards from every rank) and written by rank 0 in
safetensors files of at most ``max_shard_bytes``, so the host never holds the whole model twice.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import shutil
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors.torch import save_file
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.tensor import DTensor

from policies.experts import ExpertShard
from trainer.errors import CheckpointError, ConfigError

log = logging.getLogger(__name__)

DIGESTS = "digests.json"
LAST_WRITTEN = frozenset({"state.json", "config.json", DIGESTS})
"""Written by rank 0 after the digests; state.json is validated when read, config.json is plain JSON."""
EXPERT_KEY = "expert_{}"
SHARD_BYTES = 2 << 30
WRAPPER_SEGMENTS = ("_checkpoint_wrapped_module.", "_orig_mod.")
"""Module names activation checkpointing and torch.compile insert, which state dicts leave out."""


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _rank_and_size() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if _distributed() else (0, 1)


def expert_slices(model: nn.Module) -> dict[str, tuple[int, int]]:
    """Parameter name -> (first expert, count) of every routed-expert tensor this rank holds."""
    slices = {}
    for prefix, module in model.named_modules():
        if isinstance(module, ExpertShard):
            for name, param in module.named_parameters(recurse=False):
                if isinstance(param, DTensor):
                    raise ConfigError(
                        f"{prefix}.{name}: routed experts are RDEP-sharded plain tensors; a DTensor expert "
                        "(experts inside fully_shard) has no checkpoint layout here: pass them as ignored_params"
                    )
                fqn = f"{prefix}.{name}"
                for segment in WRAPPER_SEGMENTS:
                    fqn = fqn.replace(segment, "")
                slices[fqn] = (module.first, module.count)
    return slices


def _split_experts(tree: dict, key: str, first: int, count: int, undo: list) -> None:
    """Replace ``tree[key]`` (count experts stacked on dim 0) by one view per expert, keyed by its global index;
    ``undo`` records how to put the stacked tensor back."""
    stacked = tree[key]
    if not isinstance(stacked, torch.Tensor) or stacked.dim() == 0 or stacked.shape[0] != count:
        return  # a scalar such as Adam's step count is one value for all experts
    undo.append((tree, key, stacked))
    tree[key] = {EXPERT_KEY.format(first + i): stacked[i] for i in range(count)}


def _dcp_state(model_state: dict, optim_state: dict | None, slices: dict[str, tuple[int, int]]) -> tuple[dict, list]:
    """The tree DCP reads and writes: model and optimizer state, each expert under its own key.

    Hazard: get_state_dict hands out the optimizer's own per-parameter dicts; every dict on the way to an expert
    is copied before it is split, so the live optimizer never sees the per-expert views."""
    undo: list = []
    model_state = dict(model_state)
    for name, (first, count) in slices.items():
        if name not in model_state:  # else DCP would keep one rank's experts for all, silently
            raise CheckpointError(f"{name}: a routed-expert tensor the model's state dict does not name")
        _split_experts(model_state, name, first, count, undo)
    tree = {"model": model_state}
    if optim_state is not None:
        per_param = dict(optim_state.get("state", {}))
        for name, (first, count) in slices.items():
            if name in per_param:
                per_param[name] = dict(per_param[name])
                for key in list(per_param[name]):
                    _split_experts(per_param[name], key, first, count, undo)
        tree["optimizer"] = {**optim_state, "state": per_param}
    return tree, undo


def _restore(undo: list) -> None:
    for tree, key, stacked in undo:  # the per-expert views were read in place: the stacked tensor holds the data
        tree[key] = stacked


def save_sharded(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Every rank writes its shards of the model and optimizer state into ``directory`` (collective)."""
    model_state, optim_state = get_state_dict(model, optimizer)
    tree, _ = _dcp_state(model_state, optim_state, expert_slices(model))
    dcp.save(tree, checkpoint_id=str(directory))


def load_sharded(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Read model and optimizer state written by `save_sharded` (collective); digests already checked."""
    model_state, optim_state = get_state_dict(model, optimizer)
    tree, undo = _dcp_state(model_state, optim_state, expert_slices(model))
    try:
        dcp.load(tree, checkpoint_id=str(directory))
    except dcp.CheckpointException as exc:  # raised on every rank, naming each rank's failure
        raise CheckpointError(f"{directory}: the sharded checkpoint does not fit this model: {_reasons(exc)}") from exc
    _restore(undo)
    set_state_dict(model, optimizer, model_state_dict=tree["model"], optim_state_dict=tree["optimizer"])


def _reasons(exc: dcp.CheckpointException) -> str:
    """Each failed rank's exception in one line (DCP's own text carries every traceback)."""
    return "; ".join(
        f"rank {rank}: {type(error).__name__}: {error}" for rank, (error, _) in sorted(exc.failures.items())
    )


def _digest(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file() and p.name not in LAST_WRITTEN)


def _gather(value: object) -> list:
    if not _distributed():
        return [value]
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def record_digests(directory: Path) -> None:
    """Hash every file of ``directory`` (file i by rank i mod W); rank 0 writes ``digests.json`` (collective:
    call it once every rank's files are written)."""
    if _distributed():
        dist.barrier()  # every rank's per-rank files are on disk before any rank lists the directory
    rank, size = _rank_and_size()
    mine = {p.name: _digest(p) for i, p in enumerate(_files(directory)) if i % size == rank}
    everything = {name: value for part in _gather(mine) for name, value in part.items()}
    if rank == 0:
        (directory / DIGESTS).write_text(json.dumps(dict(sorted(everything.items())), indent=1) + "\n")


def verify_digests(directory: Path) -> None:
    """Check every file against ``digests.json`` (file i by rank i mod W); raise `CheckpointError` naming each
    missing, unlisted or altered file on every rank together (collective)."""
    rank, size = _rank_and_size()
    index = directory / DIGESTS
    try:
        expected = json.loads(index.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        expected, problems = {}, [f"{DIGESTS}: {exc}"]
    else:
        present = {p.name for p in _files(directory)}
        problems = [f"{name}: missing" for name in sorted(set(expected) - present) if rank == 0]
        problems += [f"{name}: not written by this checkpoint" for name in sorted(present - set(expected)) if rank == 0]
        for i, path in enumerate(_files(directory)):
            if i % size == rank and path.name in expected and _digest(path) != expected[path.name]:
                problems.append(f"{path.name}: altered or truncated since it was written")
    found = sorted({p for part in _gather(problems) for p in part})
    if found:
        raise CheckpointError(f"{directory}: damaged checkpoint: {'; '.join(found)}")


def stored_dtype(directory: Path) -> torch.dtype:
    """The dtype of the checkpoint's floating-point weights (float32 when it holds none)."""
    metadata = dcp.FileSystemReader(str(directory)).read_metadata().state_dict_metadata
    for key, item in metadata.items():
        if key.startswith("model.") and isinstance(item, dcp.TensorStorageMetadata):
            if item.properties.dtype.is_floating_point:
                return item.properties.dtype
    return torch.float32


def read_checkpoint(directory: Path, model: nn.Module) -> None:
    """Load the model weights of a sharded checkpoint into ``model`` in whatever layout it has (one process with
    every expert, or any sharding): the offline path of ``python -m gym export``."""
    verify_digests(directory)
    model_state = model.state_dict()
    tree, undo = _dcp_state(model_state, None, expert_slices(model))
    try:
        with warnings.catch_warnings():  # one process without a process group is what this reader is for
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(tree, checkpoint_id=str(directory))
    except dcp.CheckpointException as exc:
        raise CheckpointError(f"{directory}: the sharded checkpoint does not fit this model: {_reasons(exc)}") from exc
    _restore(undo)
    model.load_state_dict(tree["model"], strict=True)


def _plain_class(model: nn.Module) -> type:
    """The model's own class: ``fully_shard`` swaps in a subclass named FSDP<Class>."""
    from torch.distributed.fsdp import FSDPModule

    return next(c for c in type(model).__mro__ if not issubclass(c, FSDPModule))


def _global_experts(slices: dict[str, tuple[int, int]]) -> dict[str, list[tuple[int, int]]]:
    """Expert tensor name -> (first, count) on each rank."""
    per_rank = _gather(slices)
    return {name: [part[name] for part in per_rank] for name in slices}


def _full_tensor(name: str, value: torch.Tensor, layout: dict[str, list[tuple[int, int]]]) -> torch.Tensor:
    """The whole of one tensor on every rank (collective for a DTensor or an expert shard)."""
    if isinstance(value, DTensor):
        return value.full_tensor()
    if name not in layout or not _distributed():
        return value.detach()
    local = value.detach().contiguous()
    parts = [torch.empty_like(local) for _ in layout[name]]
    dist.all_gather(parts, local)
    experts = max(first + count for first, count in layout[name])
    full = local.new_empty((experts, *local.shape[1:]))
    for (first, count), part in zip(layout[name], parts, strict=True):
        full[first : first + count] = part  # ranks holding the same experts (replicas) write the same values
    return full


def _shard_names(sizes: list[int], max_bytes: int) -> list[int]:
    """File index of each tensor: consecutive tensors fill a file up to max_bytes (one larger tensor alone)."""
    index, used, out = 0, 0, []
    for size in sizes:
        if used and used + size > max_bytes:
            index, used = index + 1, 0
        out.append(index)
        used += size
    return out


def export_hf(model: nn.Module, directory: Path, max_shard_bytes: int = SHARD_BYTES) -> Path:
    """Write ``model`` as a Hugging Face model directory (collective: every rank calls it; rank 0 writes).

    Tensors are gathered one at a time and written by rank 0 into ``model.safetensors`` (or
    ``model-0000I-of-0000N.safetensors`` with ``model.safetensors.index.json``), with ``config.json`` and
    ``generation_config.json`` when the model has one. A tied weight is written once (the first name that holds
    it). The directory appears whole: it is written beside as ``DIR.tmp`` and renamed; an existing non-empty
    ``directory`` is refused. When rank 0 cannot write, every rank raises (rank 0 its own error), after the
    gathers every rank entered, so none waits for a collective the others left.
    """
    directory = Path(directory)
    rank, _ = _rank_and_size()
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "save_pretrained"):
        raise ConfigError(f"{type(model).__name__}: no Hugging Face config to export (model.config)")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ConfigError(f"{directory}: the export directory exists and is not empty; name a new one")
    state = model.state_dict(keep_vars=True)
    seen: set[int] = set()
    names = []
    for name, value in state.items():
        if id(value) not in seen:  # a tied weight appears under several names
            seen.add(id(value))
            names.append(name)
    layout = _global_experts(expert_slices(model))
    sizes = [_global_numel(state[n], layout.get(n)) * state[n].element_size() for n in names]
    files = _shard_names(sizes, max_shard_bytes)
    count = files[-1] + 1 if files else 1
    file_name = (
        (lambda i: "model.safetensors") if count == 1 else (lambda i: f"model-{i + 1:05d}-of-{count:05d}.safetensors")
    )
    tmp = directory.with_name(directory.name + ".tmp")
    failure: BaseException | None = None
    if rank == 0:
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        except OSError as exc:
            failure = exc
    buffer: dict[str, torch.Tensor] = {}
    for i, name in enumerate(names):
        full = _full_tensor(name, state[name], layout)
        if rank != 0 or failure is not None:
            continue
        buffer[name] = full.to("cpu").contiguous()
        if i + 1 == len(names) or files[i + 1] != files[i]:
            try:
                save_file(buffer, str(tmp / file_name(files[i])), metadata={"format": "pt"})
            except OSError as exc:
                failure = exc
            buffer = {}
    if rank == 0 and failure is None:
        try:
            _write_configs(model, tmp, dict(zip(names, map(file_name, files), strict=True)), sum(sizes), state)
            if directory.exists():
                directory.rmdir()
            os.replace(tmp, directory)
        except OSError as exc:
            failure = exc
    reported = _gather(None if failure is None else str(failure))[0]
    if failure is not None:
        raise failure
    if reported is not None:
        raise CheckpointError(f"{directory}: rank 0 could not write the export: {reported}")
    log.info("exported %d tensors (%.1f MB) to %s", len(names), sum(sizes) / 1e6, directory)
    return directory


def _global_numel(value: torch.Tensor, layout: list[tuple[int, int]] | None) -> int:
    if layout is None:
        return value.numel()  # a DTensor's numel is its global one
    experts = max(first + count for first, count in layout)
    return value.numel() // value.shape[0] * experts


def _write_configs(model: nn.Module, tmp: Path, weight_map: dict[str, str], total: int, state: dict) -> None:
    """config.json (the unwrapped class, the weights' dtype), generation_config.json, and the index of several
    files."""
    config = copy.deepcopy(model.config)
    config.architectures = [_plain_class(model).__name__]
    floating = [state[n].dtype for n in weight_map if state[n].is_floating_point()]
    if floating:
        config.dtype = floating[0]
    config.save_pretrained(str(tmp))
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(str(tmp))
    if len(set(weight_map.values())) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
