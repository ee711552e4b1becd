"""LoRA adapters (PEFT) on a Hugging Face policy: what trains, what the engine gets, what a checkpoint holds.

`LoraPolicy` wraps the model with `peft.get_peft_model`: every base weight is frozen, each target
`nn.Linear` gets A (r, in) and B (out, r) with B = 0, so the policy starts exactly at the base. Its pieces:

* `LoraPolicy.model`: the Hugging Face model with the adapters inside (peft's ``get_base_model()``,
  the module peft injected its layers into). The trainer scores and steps it as any causal LM:
  `trainer.update.score` reads ``model.base_model`` (the decoder) and ``get_output_embeddings()``,
  which on the `PeftModel` wrapper itself would be peft's ``LoraModel`` (logits out, no hidden states).
  The optimizer gets its trainable parameters: the adapters only.
* `MergedWeights`: what the rollout engine samples with. Our engine (and vLLM/SGLang through the
  policy server) loads plain tensors under the base model's names, not an adapter, so each target is
  pushed merged, W + (alpha / r) * B @ A. It is computed when read, one tensor at a time, from a copy of
  the adapters taken when the push starts: the trainer's model is never merged or changed, the whole
  model is never held twice, and a read after the next step still gives this step's weights.
* `BaseReference`: the KL reference, the same model with its adapters switched off for the forward
  (peft's ``disable_adapter``): no copy of the base. `trainer.config` refuses a warm start with a KL
  term, where the policy RL starts from would not be the base.
* `AdapterState`: what a checkpoint holds of the model, the adapter tensors (peft's names) only; the
  optimizer, scheduler and RNG go beside them as for any run (`trainer.checkpoint`).
* `LoraPolicy.export`: ``adapter/`` (peft's ``save_pretrained``: ``PeftModel.from_pretrained`` loads it on the
  base) and ``merged/`` (a Hugging Face directory `transformers` loads alone, written shard by shard).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import peft
import torch
from peft.tuners.lora import LoraLayer
from safetensors.torch import save_file
from torch import nn

from trainer.config import LoraConfig
from trainer.errors import ConfigError

ADAPTER = "default"  # peft's name of the one adapter a run trains

# tokenizer and template files of a model directory, copied beside the merged weights on export
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)


def check_targets(model: nn.Module, targets: Sequence[str]) -> None:
    """ConfigError naming ``lora.target_modules`` for a name that matches no module of ``model``, a module that
    is not an `nn.Linear`, or the output head; peft itself leaves a name that matches nothing out silently when
    another one matches."""
    head = model.get_output_embeddings()
    modules = dict(model.named_modules())
    linear = sorted(
        {name.rsplit(".", 1)[-1] for name, m in modules.items() if isinstance(m, nn.Linear) and m is not head}
    )
    problems = []
    for target in targets:
        found = [m for name, m in modules.items() if name == target or name.endswith("." + target)]
        if not found:
            problems.append(f"{target!r} matches no module of the model")
        elif any(m is head for m in found):
            problems.append(f"{target!r} is the output head, which the trainer applies as a plain matrix")
        elif not all(isinstance(m, nn.Linear) for m in found):
            kinds = sorted({type(m).__name__ for m in found if not isinstance(m, nn.Linear)})
            problems.append(f"{target!r} matches {', '.join(kinds)}, not nn.Linear")
    if problems:
        raise ConfigError(
            f"lora.target_modules: {'; '.join(problems)}; the model's linear layers are {', '.join(linear)}"
        )


class LoraPolicy:
    """A Hugging Face causal LM with LoRA adapters; see the module docstring."""

    def __init__(self, model: nn.Module, config: LoraConfig, source: Path | None = None) -> None:
        check_targets(model, config.target_modules)
        self.source = source
        self.peft = peft.get_peft_model(
            model,
            peft.LoraConfig(
                r=config.r,
                lora_alpha=config.alpha,
                lora_dropout=config.dropout,
                target_modules=list(config.target_modules),
                bias="none",
                task_type="CAUSAL_LM",
            ),
        )

    @property
    def model(self) -> nn.Module:
        """The Hugging Face model with the adapters inside: what the trainer scores and steps."""
        return self.peft.get_base_model()

    def merged(self) -> MergedWeights:
        return MergedWeights(self.model)

    def reference(self) -> BaseReference:
        return BaseReference(self.peft)

    def checkpointed(self) -> AdapterState:
        return AdapterState(self.peft)

    def export(self, directory: Path, shard_bytes: int = 2 << 30) -> None:
        """``directory/adapter`` (peft's format) and ``directory/merged`` (a Hugging Face model directory),
        written beside it first and then moved in place of an earlier export (no stale shard survives)."""
        directory = Path(directory)
        building = directory.with_name(directory.name + ".tmp")
        shutil.rmtree(building, ignore_errors=True)
        self.peft.save_pretrained(str(building / "adapter"))
        write_merged(self.model, self.merged(), building / "merged", shard_bytes, self.source)
        shutil.rmtree(directory, ignore_errors=True)
        os.replace(building, directory)


class MergedWeights(Mapping[str, torch.Tensor]):
    """Every tensor of the base model under its own name; a LoRA target's weight is W + scaling * B @ A.

    Built from a snapshot of the adapters (adapter-sized) and references to the frozen base tensors; each
    value is computed when read (fp32 product and sum, rounded once to the weight's dtype). A reader that
    iterates twice (the engine checks every tensor, then copies it) computes each target twice.
    """

    def __init__(self, model: nn.Module) -> None:
        layers = {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}
        self._base: dict[str, torch.Tensor] = {}
        self._adapters: dict[str, tuple[torch.Tensor, torch.Tensor, float, bool]] = {}
        for key, tensor in model.state_dict().items():
            owner, _, rest = key.rpartition(".base_layer.")
            layer = layers.get(owner) if owner else None
            if layer is not None:  # a target's own weight and bias, under the name the base model gives them
                key = f"{owner}.{rest}"
                if rest == "weight":
                    self._adapters[key] = (
                        layer.lora_A[ADAPTER].weight.detach().clone(),
                        layer.lora_B[ADAPTER].weight.detach().clone(),
                        float(layer.scaling[ADAPTER]),
                        bool(layer.fan_in_fan_out),
                    )
            elif any(key.startswith(f"{name}.") for name in layers):
                continue  # the adapters' own tensors (lora_A, lora_B): merged in, never pushed apart
            self._base[key] = tensor.detach()
        first: dict[int, str] = {}
        # names that share storage with an earlier one (tied input and output embeddings): written once on export
        self.aliases = {k for k, t in self._base.items() if first.setdefault(t.data_ptr(), k) != k}

    def __getitem__(self, name: str) -> torch.Tensor:
        weight = self._base[name]
        if name not in self._adapters:
            return weight
        a, b, scaling, transposed = self._adapters[name]
        delta = (b.float() @ a.float()) * scaling  # (out, in); peft's get_delta_weight, in fp32
        if transposed:
            delta = delta.T
        return (weight.float() + delta).to(weight.dtype)

    def __iter__(self) -> Iterator[str]:
        return iter(self._base)

    def __len__(self) -> int:
        return len(self._base)

    @property
    def targets(self) -> list[str]:
        """Names of the merged weights."""
        return list(self._adapters)

    @property
    def snapshot_bytes(self) -> int:
        """Bytes this mapping holds of its own (the adapters' copy); everything else is the model's."""
        return sum(a.nbytes + b.nbytes for a, b, _, _ in self._adapters.values())


class BaseReference(nn.Module):
    """The KL reference: the policy's own modules run with every adapter switched off, in eval mode.

    Quacks as `trainer.update.score` reads a model (``base_model(...)``, ``get_output_embeddings()``). Hazard:
    while its forward runs, the shared model has no adapters; the loop never scores the policy at the same time
    (the KL offsets and the update run one after the other).
    """

    def __init__(self, model: peft.PeftModel) -> None:
        super().__init__()
        self.peft = model

    @property
    def base_model(self):
        return self._forward

    def get_output_embeddings(self) -> nn.Module:
        return self.peft.get_base_model().get_output_embeddings()

    def _forward(self, **inputs):
        inner = self.peft.get_base_model()
        with self.peft.disable_adapter(), _eval(inner):
            return inner.base_model(**inputs)


@contextmanager
def _eval(model: nn.Module):
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


class AdapterState(nn.Module):
    """What a LoRA run's checkpoint holds of the model: the adapter tensors under peft's names.

    `trainer.checkpoint.Checkpointer` takes a module and reads its tensors through ``state_dict()`` and
    ``load_state_dict(tensors, strict=True)``. This module holds the policy (its parameters are the policy's)
    and answers those two with the adapters only: a checkpoint is adapter-sized and holds no ``config.json``
    (it is no model directory on its own; `LoraPolicy.export` writes those).
    """

    def __init__(self, model: peft.PeftModel) -> None:
        super().__init__()
        self.policy = model

    def state_dict(self, *args, **kwargs) -> dict[str, torch.Tensor]:
        return dict(peft.get_peft_model_state_dict(self.policy, adapter_name=ADAPTER))

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], strict: bool = True, assign: bool = False):
        own = self.state_dict()
        missing, unexpected = sorted(own.keys() - state_dict.keys()), sorted(state_dict.keys() - own.keys())
        if strict and (missing or unexpected):
            raise KeyError(
                f"the checkpoint's adapter does not fit this lora section: {len(missing)} missing, e.g. "
                f"{missing[:2]}; {len(unexpected)} unexpected, e.g. {unexpected[:2]}"
            )
        for key, value in own.items():
            if key in state_dict and state_dict[key].shape != value.shape:
                raise ValueError(f"{key}: shape {tuple(state_dict[key].shape)}, the adapter's is {tuple(value.shape)}")
        peft.set_peft_model_state_dict(self.policy, dict(state_dict), adapter_name=ADAPTER)


def write_merged(
    model: nn.Module, weights: MergedWeights, directory: Path, shard_bytes: int, source: Path | None = None
) -> None:
    """A Hugging Face model directory: config, generation config, the merged weights in safetensors shards of at
    most ``shard_bytes`` (one tensor over it gets a shard of its own) written as they fill, with
    ``model.safetensors.index.json`` when there are several, and the source directory's tokenizer files."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(str(directory))
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(str(directory))
    parts: list[list[str]] = []
    shard: dict[str, torch.Tensor] = {}
    size = total = 0
    for name in weights:
        if name in weights.aliases:
            continue
        tensor = weights[name].detach().to("cpu").contiguous()
        if shard and size + tensor.nbytes > shard_bytes:
            _write_part(shard, directory, len(parts))
            parts.append(list(shard))
            shard, size = {}, 0
        shard[name] = tensor
        size += tensor.nbytes
        total += tensor.nbytes
    if shard:
        _write_part(shard, directory, len(parts))
        parts.append(list(shard))
    if len(parts) == 1:
        os.replace(directory / _part_name(0), directory / "model.safetensors")
    else:
        weight_map = {}
        for index, names in enumerate(parts):
            final = f"model-{index + 1:05d}-of-{len(parts):05d}.safetensors"
            os.replace(directory / _part_name(index), directory / final)
            weight_map.update(dict.fromkeys(names, final))
        index_file = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index_file, indent=2) + "\n")
    for name in TOKENIZER_FILES if source is not None else ():
        if (Path(source) / name).is_file():
            shutil.copy2(Path(source) / name, directory / name)


def _part_name(index: int) -> str:
    return f"part-{index:05d}.safetensors.tmp"


def _write_part(shard: dict[str, torch.Tensor], directory: Path, index: int) -> None:
    save_file(shard, str(directory / _part_name(index)), metadata={"format": "pt"})
