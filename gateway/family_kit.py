"""The parts most family adapters are made of (gateway.family.FamilyAdapter), so an adapter holds only what is
its own: `BaseAdapter` (every protocol member with the default a family without voices, references or
manifest facts wants), `encode_clip` (a reference clip through a checkpoint's feature model), `stored_voice_of`
(a named voice of the deployment, refused when another family made it) and `checked_length_and_seed`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ttscore.contract import families
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.manifest import Manifest
from ttscore.contract.rules import FamilyRules
from ttscore.contract.wire import TensorIO

from .backend import INTERNAL, INVALID_ARG, BackendError, InferenceBackend
from .errors import bad_request, from_invalid_request
from .family import FeatureEnv, PlanContext, ServedCheckpoint, SpeechPlan
from .longtext import segment_seed, split_segments
from .speech_fields import SpeechFields, StoredVoice
from .voices.precomputed import PrecomputedVoice, SkipVoice


class BaseAdapter:
    """A family adapter's defaults: answers only when named (not routed by task), no manifest facts, no
    reference features, no uploaded, precomputed or stored voices; the generation inputs are the segment's
    text, `max_new_tokens`, its seed and the checked `extra_params`. A family sets `family`, `rules`,
    `default_task` and `plan`, and overrides what it has."""

    family: str
    rules: FamilyRules
    default_task: str
    routes_by_task = False
    caches_voice_features = False
    clones_voices = False
    voice_aliases: dict[str, str] = {}  # noqa: RUF012  (read only)

    def manifest_facts(self, manifest: Manifest) -> dict[str, Any]:
        return {}

    def plan(self, f: SpeechFields, named: ServedCheckpoint | None, text: str, deployment: PlanContext) -> SpeechPlan:
        raise NotImplementedError

    def needs_reference(self, plan: SpeechPlan) -> bool:
        return False

    async def reference_features(self, plan: SpeechPlan, env: FeatureEnv) -> Any:
        raise InvalidRequest(f"{self.rules.name} takes no reference audio", "ref_audio")

    def generation_fields(self, plan: SpeechPlan, segment: int) -> dict[str, Any]:
        return {
            "text": plan.texts[segment],
            "max_new_tokens": plan.max_new_tokens,
            "seed": segment_seed(plan.seed, segment, self.rules.field("seed").hi),
            **self.knob_fields(plan.knobs),
        }

    def knob_fields(self, knobs: Mapping[str, int | float]) -> dict[str, Any]:
        """The generation inputs of the checked `extra_params` (by default: as named)."""
        return dict(knobs)

    def generation_inputs(self, plan: SpeechPlan, segment: int, features: Any) -> dict[str, np.ndarray]:
        return triton_io.request_tensors(**self.generation_fields(plan, segment))

    # --- voices ------------------------------------------------------------------------------------------

    async def clip_features(self, backend: InferenceBackend, model: str, audio: np.ndarray, rate: int,
                            prompt: bool, request_id: str) -> Any:
        raise InvalidRequest(f"{self.rules.name} has no uploaded voices", "voice")

    def precomputed_checks(self, checkpoints: Sequence[ServedCheckpoint]) -> dict[str, Any]:
        return {}

    def precomputed_voice(self, *args: Any, **checks: Any) -> PrecomputedVoice:  # (root, raw_name, entry, **checks)
        raise SkipVoice(f"{self.rules.name} has no precomputed voices")

    def stored_voice(self, voice: PrecomputedVoice) -> StoredVoice:
        raise SkipVoice(f"{self.rules.name} has no precomputed voices")


async def encode_clip(backend: InferenceBackend, model: str, audio: np.ndarray, rate: int, request_id: str,
                      outputs: Sequence[TensorIO | str], **inputs: np.ndarray) -> list[np.ndarray]:
    """A reference clip through a checkpoint's feature model (inputs `audio`, `sample_rate` and `inputs`): its
    `outputs`, in order. The model refusing the clip is the client's `ref_audio` (InvalidRequest); a missing
    output is the server's (BackendError INTERNAL)."""
    try:
        got = await backend.infer(model, {
            "audio": np.ascontiguousarray(audio, dtype=np.float32).reshape(-1),
            "sample_rate": np.array([rate], dtype=np.int32),
            **inputs,
        }, request_id)
    except BackendError as exc:
        if exc.code == INVALID_ARG:  # the encoder refused the clip: the client's ref_audio
            raise InvalidRequest(exc.message, "ref_audio") from None
        raise
    out = []
    for row in outputs:
        name = row if isinstance(row, str) else row.name
        value = got.get(name)
        if value is None:
            raise BackendError(INTERNAL, f"{model} returned no {name}")
        out.append(np.asarray(value))
    return out


def stored_voice_of(deployment: PlanContext, name: str, ckpt: ServedCheckpoint, unknown: str,
                    fits: str | None = None) -> StoredVoice:
    """The deployment's stored voice `name` for `ckpt`, or a 400 naming `voice`: `unknown` when there is none;
    when another family's precomputed voice file made it; with `fits` ("codec", "checkpoint"), when it was
    precomputed for other checkpoints of the family than `ckpt` (StoredVoice.models)."""
    stored = deployment.resolve_voice(name)
    if stored is None:
        raise bad_request(unknown, "voice")
    if stored.family not in (None, ckpt.family):
        made = families.display_name(stored.family)
        raise bad_request(f"Voice '{stored.name}' is a precomputed {made} voice: it cannot be used with "
                          f"{ckpt.rules.name} model `{ckpt.name}`", "voice")
    if fits is not None and stored.models is not None and ckpt.name not in stored.models:
        raise bad_request(f"Voice '{stored.name}' was precomputed with another {ckpt.rules.name} {fits} (it fits "
                          f"{', '.join(stored.models) or 'no served model'}), not `{ckpt.name}`", "voice")
    return stored


def checked_length_and_seed(f: SpeechFields, rules: FamilyRules) -> tuple[int | None, int | None]:
    """`max_new_tokens` and `seed` of a request, checked (400 naming the field); None where not given."""
    try:
        return rules.field("max_new_tokens").check(f.max_new_tokens), rules.field("seed").check(f.seed)
    except InvalidRequest as exc:
        raise from_invalid_request(exc) from None


def segments_of(text: str, deployment: PlanContext) -> tuple[str, ...]:
    """A long `input`'s segments (gateway.longtext), or () when it is one generation."""
    parts = split_segments(text, deployment.segment_chars)
    return tuple(parts) if len(parts) > 1 else ()


__all__ = ["BaseAdapter", "checked_length_and_seed", "encode_clip", "segments_of", "stored_voice_of"]
