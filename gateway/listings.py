"""The listings of a deployment: GET /v1/models (a card per served model and per OpenAI model alias) and
GET /v1/audio/voices (built-in, precomputed and uploaded voices, and the OpenAI voice aliases), as the
protocol's response models."""

from __future__ import annotations

import time
from typing import Any

from .family import ServedCheckpoint
from .planning import Deployment
from .protocol import ADAPTER_FIELDS, AdapterCard, ModelCard, ModelList, VoicesResponse


class Listings:
    """What a deployment lists; `created` is the models' creation time shown in their cards (the gateway's
    start)."""

    def __init__(self, deployment: Deployment, created: int | None = None) -> None:
        self.deployment = deployment
        self.created = int(time.time()) if created is None else created

    def models(self) -> ModelList:
        """Each served model's card, then one per model alias (an alias without a target routes like an
        omitted `model`: its card is the default model's)."""
        data = [self._card(c, c.name) for c in self.deployment.checkpoints]
        for alias, target in self.deployment.model_aliases.items():
            ckpt = self.deployment.find_model(target) if target is not None else self.deployment.default_model()
            if ckpt is not None:
                data.append(self._card(ckpt, alias).model_copy(update={"alias_of": ckpt.name,
                                                                       "routed_by_task": target is None}))
        return ModelList(data=data)

    def _card(self, c: ServedCheckpoint, model_id: str) -> ModelCard:
        return ModelCard(
            id=model_id,
            created=self.created,
            family=c.family,
            task_type=c.task,  # type: ignore[arg-type]  # a served task is one of TaskType's
            voices=list(c.speakers),
            languages=sorted("Auto" if x == "auto" else x.title() for x in c.languages),
            sample_rate=c.sample_rate,
            alias_of=None,
            routed_by_task=None,
            adapter=AdapterCard.model_validate({k: c.lora.get(k) for k in ADAPTER_FIELDS}) if c.lora else None,
        )

    def voices(self) -> VoicesResponse:
        """The voice registry's listing (built-in, precomputed and uploaded names), or without one the
        built-in speakers and the deployment's uploaded voices; with the voice aliases when there are any."""
        listing = getattr(self.deployment.voices, "listing", None)
        if listing is not None:
            body: dict[str, Any] = listing()
        else:
            uploaded = self.deployment.voices.uploaded_voices()
            names = self.deployment.builtin_voices() + [v["name"] for v in uploaded if v.get("name")]
            body = {"voices": list(dict.fromkeys(names)), "uploaded_voices": uploaded}
        if self.deployment.voice_aliases:  # OpenAI's voice names -> the presets they speak with
            body["voice_aliases"] = dict(self.deployment.voice_aliases)
        return VoicesResponse.model_validate(body)


__all__ = ["Listings"]
