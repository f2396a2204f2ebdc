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
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ttscore.contract import families
from ttscore.contract.manifest import Manifest
from ttscore.contract.rules import FamilyRules, RefAudioBounds

from .settings import CheckpointSettings
from .speech_fields import OutputSpec, SpeechFields, StoredVoice

if TYPE_CHECKING:
    from .backend import InferenceBackend
    from .voices.precomputed import PrecomputedVoice


# --- the checkpoint record and the plan --------------------------------------------------------------


@dataclass(frozen=True)
class FamilyFacts:
    """What a family's adapter reads from a checkpoint's manifest at load (FamilyAdapter.manifest_facts): a
    family with facts subclasses it with its own typed fields; this base has none."""


NO_FACTS = FamilyFacts()


@dataclass(frozen=True, kw_only=True)
class ServedCheckpoint:
    """A served checkpoint with the facts the Speech API needs from its manifest, and its family's adapter
    (handed to it once, when the deployment is loaded: gateway.checkpoints)."""

    settings: CheckpointSettings
    adapter: FamilyAdapter
    speakers: tuple[str, ...]  # lower-case built-in speaker names (CustomVoice)
    languages: tuple[str, ...]  # lower-case, "auto" included; empty for a family that refuses "Auto" too
    sample_rate: int
    samples_per_frame: int
    model_size: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    speaker_embed_dim: int | None = None  # Base: the x-vector size (checks precomputed voices)
    num_code_groups: int | None = None
    family: str  # the manifest's model family (ttscore.contract.families)
    # What the family's gateway adapter read from the manifest (FamilyAdapter.manifest_facts).
    facts: FamilyFacts = NO_FACTS
    # The startup LoRA adapter merged into its weights at export (the manifest's `adapter`), or None.
    lora: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def variant(self) -> str:
        return self.settings.variant

    @property
    def task(self) -> str:
        return self.rules.variants[self.settings.variant]

    @property
    def rules(self) -> FamilyRules:
        return families.RULES[self.family]  # the contract's registry (what the runtime checks too)

    @property
    def triton_model(self) -> str:
        return self.settings.triton_model

    @property
    def voice_features_model(self) -> str | None:
        return self.settings.voice_features_model

    def answers_to(self, model: str) -> bool:
        """`model` names this checkpoint: its id, an alias, or a hub-style `org/<id>`."""
        ids = (self.settings.name, *self.settings.aliases)
        return model in ids or model.rsplit("/", 1)[-1] in ids


@dataclass(frozen=True, kw_only=True)
class SpeechPlan:
    checkpoint: ServedCheckpoint
    task: str  # CustomVoice | VoiceDesign | Base
    text: str
    output: OutputSpec
    speaker: str | None = None
    language: str = "auto"  # lower-case, "auto" included
    instructions: str | None = None
    ref_audio: str | None = None  # the locator as sent (Base, unless a stored voice supplies it)
    ref_text: str | None = None  # only for in-context cloning
    x_vector_only: bool = False
    stored_voice: StoredVoice | None = None
    non_streaming_mode: bool | None = None
    max_new_tokens: int | None = None  # None: the family's own cap (VoxCPM2)
    seed: int | None = None
    initial_chunk_frames: int | None = None
    segments: tuple[str, ...] = ()  # long text (gateway.longtext); empty: `text` is one generation
    seed_drawn: bool = False  # `seed` is the gateway's (see reproducible_plan), not the client's
    knobs: Mapping[str, int | float] = field(default_factory=dict)  # extra_params, checked (FamilyRules.knobs)
    # Word timestamps (gateway.word_timing): the forced aligner's Triton model, None when not asked for.
    aligner_model: str | None = None
    # Where each of `texts` starts in the request's original `input` (code points): words' char offsets index it.
    text_offsets: tuple[int, ...] = ()

    @property
    def family(self) -> str:
        return self.checkpoint.family

    @property
    def needs_voice_features(self) -> bool:
        """Does the generation take reference features (the family's adapter says)?"""
        return self.checkpoint.adapter.needs_reference(self)

    @property
    def texts(self) -> tuple[str, ...]:
        """The text of each generation, in order."""
        return self.segments or (self.text,)

    def generation_fields(self, segment: int = 0) -> dict[str, Any]:
        """speech_generation inputs (ttscore.contract.tensors names) of one segment, except the
        reference features."""
        return self.checkpoint.adapter.generation_fields(self, segment)

    def generation_inputs(self, segment: int, features: Any) -> dict[str, np.ndarray]:
        """The request tensors of one segment, reference features included."""
        return self.checkpoint.adapter.generation_inputs(self, segment, features)


class PlanContext(Protocol):
    """What an adapter's `plan` may ask of the deployment (gateway.planning.Deployment)."""

    segment_chars: int  # long input is generated in segments of about this many characters (gateway.longtext)
    # Word timestamps: the input is generated one sentence a segment (gateway.longtext.split_sentences).
    segment_by_sentence: bool

    def routed_by_task(self) -> list[ServedCheckpoint]:
        """The checkpoints a request without `model` is routed among."""
        ...

    def preset_voice(self, name: str) -> str:
        """A voice alias's preset speaker; any other name unchanged."""
        ...

    def resolve_voice(self, name: str) -> StoredVoice | None:
        """An uploaded or precomputed voice by name (None: not a stored voice)."""
        ...


# --- the adapter ---------------------------------------------------------------------------------------


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

    def manifest_facts(self, manifest: Manifest) -> FamilyFacts:
        """Facts of a checkpoint this adapter needs later (ServedCheckpoint.facts)."""
        ...

    def plan(self, f: SpeechFields, named: ServedCheckpoint | None, text: str, deployment: PlanContext) -> SpeechPlan:
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


__all__ = ["NO_FACTS", "FamilyAdapter", "FamilyFacts", "FeatureEnv", "PlanContext", "ServedCheckpoint", "SpeechPlan", "audio_key",
           "default_voice_aliases"]
