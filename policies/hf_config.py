"""The `transformers` config of the RDEP MoE policy: `policies.config.MoEArchitecture`'s fields, so the model
round-trips through `save_pretrained` / `AutoConfig.from_pretrained`."""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig

from policies.config import MODEL_TYPE, MoEArchitecture


class RdepMoeConfig(PretrainedConfig):
    """transformers config of the RDEP MoE policy; its architecture fields are `MoEArchitecture`'s."""

    model_type = MODEL_TYPE
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(self, **kwargs: Any) -> None:
        # Validate through the pydantic model (raises on a bad value), then expose plain attributes.
        arch = MoEArchitecture(**{k: kwargs.pop(k) for k in list(kwargs) if k in MoEArchitecture.model_fields})
        for key, value in arch.model_dump().items():
            setattr(self, key, value)
        kwargs["tie_word_embeddings"] = False  # untied embeddings by design
        super().__init__(**kwargs)

    @property
    def architecture(self) -> MoEArchitecture:
        return MoEArchitecture(**{k: getattr(self, k) for k in MoEArchitecture.model_fields})

    @classmethod
    def from_architecture(cls, arch: MoEArchitecture) -> RdepMoeConfig:
        return cls(**arch.model_dump())
