"""What differs between model families, as one protocol: a family's gateway adapter.

The gateway's shared code (planning, services, voices) never names a family: it looks up the
adapter of a checkpoint's manifest `family` (gateway.families) and asks it. An adapter owns

- planning a request for its checkpoints (which Speech API fields it takes, its voices and defaults,
  its 400s naming the field), from the request fields pydantic typed (gateway.protocol);
- the reference features a plan needs (computed through the backend's one generic `infer`, with the
  service's shared cache) and the generation inputs it sends, built in one step from the plan;
- what an uploaded voice computes for it and what a precomputed voice stores for it;
- the facts it reads from a checkpoint's manifest.

Its per-family limits are data in its FamilyRules (ttscore.contract.rules), which the adapter
carries as `rules`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ttscore.contract.manifest import Manifest
from ttscore.contract.rules import FamilyRules, RefAudioBounds

if TYPE_CHECKING:
    from .backend import InferenceBackend
    from .checkpoints import ServedCheckpoint
    from .planning import Deployment, SpeechFields, SpeechPlan, StoredVoice
    from .voices.precomputed import PrecomputedVoice


def takes_open_text(plan: SpeechPlan) -> bool:
    """Can the plan's generation take more text while it runs (the WebSocket's incremental mode)?
    Its family adapter's `takes_open_text(plan)`; a family without one cannot."""
    check = getattr(plan.checkpoint.adapter, "takes_open_text", None)
    return bool(check(plan)) if check is not None else False


class FeatureEnv(Protocol):
    """What the speech service lends an adapter to compute a plan's reference features. Errors:
    InvalidRequest (400 naming the field) and BackendError (mapped like any Triton error)."""

    backend: InferenceBackend
    request_id: str

    async def ref_audio(self, locator: str, bounds: RefAudioBounds) -> tuple[np.ndarray, int]:
        """A `ref_audio` locator fetched and decoded within the family's bounds."""
        ...

    async def shared(self, key: tuple[Any, ...], compute: Callable[[], Awaitable[Any]]) -> Any:
        """`compute()` once for concurrent and recent callers with the same key (failures not kept)."""
        ...


def audio_key(model: str, audio: np.ndarray, rate: int, *tags: object) -> tuple[Any, ...]:
    """A shared-cache key for features of one clip (by its decoded content) through one model."""
    digest = hashlib.sha256(np.ascontiguousarray(audio, dtype=np.float32).tobytes()).hexdigest()
    return (model, int(rate), digest, *tags)


class FamilyAdapter(Protocol):
    family: str  # the manifest's `family`
    rules: FamilyRules
    # Requests without `model` are routed among this family's checkpoints by task (else they go to
    # a family that does, and this family answers only when `model` names one of its checkpoints).
    routes_by_task: bool
    default_task: str  # where a request without `model` and task goes (Deployment.default_model)
    # Uploaded voices: True, the voice store computes the features of a voice once (for the first
    # served Base checkpoint of the family) and keeps them in its FeatureCache; False, they are
    # computed at upload for every served checkpoint and prompt mode (gateway.voice_registry).
    caches_voice_features: bool
    # Cloning from reference audio: its checkpoints then need a voice-features model (gateway.checkpoints).
    clones_voices: bool
    voice_aliases: dict[str, str]  # default OpenAI voice name -> preset speaker (gateway.aliases)

    def manifest_facts(self, manifest: Manifest) -> dict[str, Any]:
        """Facts of a checkpoint this adapter needs later (ServedCheckpoint.facts)."""
        ...

    def plan(self, f: SpeechFields, named: ServedCheckpoint | None, text: str, deployment: Deployment) -> SpeechPlan:
        """Validate and route a request for this family (`named`: the checkpoint `model` names)."""
        ...

    def needs_reference(self, plan: SpeechPlan) -> bool:
        """Does the plan's generation take reference features?"""
        ...

    async def reference_features(self, plan: SpeechPlan, env: FeatureEnv) -> Any:
        """The reference features of a plan that needs them (stored voice or `ref_audio`)."""
        ...

    def generation_fields(self, plan: SpeechPlan, segment: int) -> dict[str, Any]:
        """speech_generation inputs (ttscore.contract.tensors names) of one segment, without the
        reference features."""
        ...

    def generation_inputs(self, plan: SpeechPlan, segment: int, features: Any) -> dict[str, np.ndarray]:
        """The request tensors of one segment: the plan's fields and its reference features."""
        ...

    # --- voices ----------------------------------------------------------------------------------

    async def clip_features(self, backend: InferenceBackend, model: str, audio: np.ndarray, rate: int,
                            prompt: bool, request_id: str) -> Any:
        """The features of an uploaded clip through a checkpoint's feature model (`prompt`: the voice
        has a transcript)."""
        ...

    def precomputed_checks(self, checkpoints: Sequence[ServedCheckpoint]) -> dict[str, Any]:
        """The keyword arguments of `precomputed_voice` that check profiles against the served checkpoints."""
        ...

    def precomputed_voice(self, root: Path, raw_name: Any, entry: Any, **checks: Any) -> PrecomputedVoice:
        """A precomputed voice of this family from its manifest entry (ttscore.contract.voicefile);
        gateway.voices.precomputed.SkipVoice naming what makes it unusable."""
        ...

    def stored_voice(self, voice: PrecomputedVoice) -> StoredVoice:
        """The planning view of a precomputed voice of this family."""
        ...


def default_voice_aliases(adapters: Iterable[FamilyAdapter]) -> dict[str, str]:
    """The default voice aliases of the served families (the first family's wins a shared name)."""
    out: dict[str, str] = {}
    for adapter in adapters:
        for alias, speaker in adapter.voice_aliases.items():
            out.setdefault(alias, speaker)
    return out


__all__ = ["FamilyAdapter", "FeatureEnv", "audio_key", "default_voice_aliases"]
