"""The parts most family adapters are made of (gateway.family.FamilyAdapter), so an adapter holds only what is
its own:

- `BaseAdapter`: every protocol member with the default a family without voices, references or manifest facts
  wants, the plan built the same way for every family (`new_plan`) and the cloning path a family that clones
  from reference audio shares (`reference_features` through its `clip_features`);
- `encode_clip` (a reference clip through a checkpoint's feature model), `requested_voice` / `stored_voice_of`
  (a named voice of the deployment, refused when another family made it), `clone_reference` (the clip and
  transcript a request clones from) and `checked_limits`;
- precomputed voices of reference codes checked against the served codecs (`CodecTarget`, `CodesVoice`,
  `codec_models`), and `facts_of` (a checkpoint's typed manifest facts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ttscore.contract import families
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.manifest import Manifest
from ttscore.contract.rules import FamilyRules
from ttscore.contract.voicefile import REF_CODE
from ttscore.contract.wire import TensorIO

from .backend import INTERNAL, INVALID_ARG, BackendError, InferenceBackend
from .errors import bad_request, from_invalid_request
from .family import NO_FACTS, FamilyFacts, FeatureEnv, PlanContext, ServedCheckpoint, SpeechPlan, audio_key
from .longtext import segment_seed, split_segments, split_sentences
from .speech_fields import (
    MAX_REF_TEXT_CHARS,
    SpeechFields,
    StoredVoice,
    plan_output,
    refuse_unsupported,
    text_field,
)
from .voices.precomputed import PrecomputedVoice, SkipVoice, description, read_entry

F = TypeVar("F", bound=FamilyFacts)


class BaseAdapter:
    """A family adapter's defaults: answers only when named (not routed by task), no manifest facts, no
    uploaded, precomputed or stored voices. A family sets `family`, `rules`, `default_task` and `plan_request`,
    and overrides what it has.

    A family that `clones_voices` names the request input its reference features go in (`reference_input`)
    and computes them in `clip_features`; its plans then need them whenever they carry a clip or a stored
    voice (`needs_reference`), taken from a precomputed voice, an upload (computed at upload) or `ref_audio`."""

    family: str
    rules: FamilyRules
    default_task: str
    routes_by_task = False
    caches_voice_features = False
    clones_voices = False
    voice_aliases: dict[str, str] = {}  # noqa: RUF012  (read only)
    plan_type: type[SpeechPlan] = SpeechPlan
    reference_input: str | None = None  # the speech_generation input of the reference features
    clip_codes = False  # they are codes, the feature model's output of that name (the default clip_features)

    def manifest_facts(self, manifest: Manifest) -> FamilyFacts:
        return NO_FACTS

    # --- planning ------------------------------------------------------------------------------------------

    def plan(self, f: SpeechFields, named: ServedCheckpoint | None, text: str, deployment: PlanContext) -> SpeechPlan:
        """The family's unsupported fields refused (`refuse`), then its own rules (`plan_request`)."""
        assert named is not None  # not routed by task: always the named (or only) checkpoint
        self.refuse(f)
        return self.plan_request(f, named, text, deployment)

    def refuse(self, f: SpeechFields) -> None:
        """400 naming the first field the family does not take."""
        refuse_unsupported(f, self.rules)

    def plan_request(self, f: SpeechFields, ckpt: ServedCheckpoint, text: str, deployment: PlanContext
                     ) -> SpeechPlan:
        raise NotImplementedError

    def new_plan(self, f: SpeechFields, ckpt: ServedCheckpoint, text: str, deployment: PlanContext,
                 **fields: Any) -> SpeechPlan:
        """A plan (`plan_type`) of `ckpt`'s task with `fields`, and what every family plans alike unless given
        in `fields`: the shared output rules, the checked `max_new_tokens`, `initial_codec_chunk_frames` and
        `seed` (checked_limits), the long input's segments and the checked `extra_params`."""
        if "output" not in fields:
            fields["output"] = plan_output(f, ckpt.sample_rate)
        limits = ("max_new_tokens", "initial_chunk_frames", "seed")
        if any(name not in fields for name in limits):
            checked = dict(zip(limits, checked_limits(f, self.rules), strict=True))
            fields = {**{k: v for k, v in checked.items() if k not in fields}, **fields}
        fields.setdefault("task", ckpt.task)
        fields.setdefault("segments", segments_of(text, deployment))
        fields.setdefault("knobs", self.rules.knobs(f.extra_params))
        return self.plan_type(checkpoint=ckpt, text=text, **fields)

    # --- generation ----------------------------------------------------------------------------------------

    def needs_reference(self, plan: SpeechPlan) -> bool:
        return plan.ref_audio is not None or plan.stored_voice is not None

    def prompt_mode(self, plan: SpeechPlan) -> bool | None:
        """The prompt flag of a plan's clip features when they depend on it (VoxCPM2: with a transcript the
        clip is a continuation prompt); None (the default) when they do not."""
        return None

    async def reference_features(self, plan: SpeechPlan, env: FeatureEnv) -> Any:
        """A precomputed voice's features (`precomputed_features`), an upload's (computed at upload through the
        checkpoint's feature model), or `ref_audio`'s through it (shared by concurrent and recent requests)."""
        if not self.clones_voices:
            raise InvalidRequest(f"{self.rules.name} takes no reference audio", "ref_audio")
        stored = plan.stored_voice
        if stored is not None and stored.precomputed is not None:
            return self.precomputed_features(plan, stored)
        model = plan.checkpoint.voice_features_model
        if not model:
            raise InvalidRequest(f"model `{plan.checkpoint.name}` cannot clone voices", "ref_audio")
        prompt = self.prompt_mode(plan)
        if stored is not None:
            if stored.model_features is None:
                raise InvalidRequest(f"Voice '{stored.name}' cannot be used with {plan.checkpoint.name}", "voice")
            # without a prompt mode of its own: the one the upload computed them in (its transcript's)
            return await stored.model_features(model, prompt if prompt is not None else
                                               transcript(stored.ref_text) is not None)
        assert plan.ref_audio is not None
        audio, rate = await env.ref_audio(plan.ref_audio, self.rules.ref_audio)
        tags = () if prompt is None else ("prompt" if prompt else "reference",)
        return await env.shared(audio_key(model, audio, rate, *tags),
                                lambda: self.clip_features(env.backend, model, audio, rate, bool(prompt),
                                                           env.request_id))

    def precomputed_features(self, plan: SpeechPlan, stored: StoredVoice) -> Any:
        """The reference features of a precomputed voice (its StoredVoice.precomputed, by default)."""
        return stored.precomputed

    def generation_fields(self, plan: SpeechPlan, segment: int) -> dict[str, Any]:
        return {
            "text": plan.texts[segment],
            "max_new_tokens": plan.max_new_tokens,
            "seed": segment_seed(plan.seed, segment, self.rules.field("seed").hi),
            **self.knob_fields(plan.knobs),
            "instructions": plan.instructions,
            "ref_text": plan.ref_text,
            "initial_chunk_frames": plan.initial_chunk_frames,
        }

    def knob_fields(self, knobs: Mapping[str, int | float]) -> dict[str, Any]:
        """The generation inputs of the checked `extra_params` (by default: as named)."""
        return dict(knobs)

    def generation_inputs(self, plan: SpeechPlan, segment: int, features: Any) -> dict[str, np.ndarray]:
        fields = self.generation_fields(plan, segment)
        if self.reference_input is not None and features is not None:
            fields[self.reference_input] = features
        return triton_io.request_tensors(**fields)

    # --- voices --------------------------------------------------------------------------------------------

    async def clip_features(self, backend: InferenceBackend, model: str, audio: np.ndarray, rate: int,
                            prompt: bool, request_id: str) -> Any:
        """A clip's features through one of the family's feature models. By default, for a family whose features
        are codes (`clip_codes`), the model's output named as `reference_input`, as int64 (the transcript,
        `prompt`, does not change them)."""
        if not self.clip_codes or self.reference_input is None:
            raise InvalidRequest(f"{self.rules.name} has no uploaded voices", "voice")
        (codes,) = await encode_clip(backend, model, audio, rate, request_id, [self.reference_input])
        return codes.astype(np.int64)

    def precomputed_checks(self, checkpoints: Sequence[ServedCheckpoint]) -> dict[str, Any]:
        return {}

    def precomputed_voice(self, *args: Any, **checks: Any) -> PrecomputedVoice:  # (root, raw_name, entry, **checks)
        raise SkipVoice(f"{self.rules.name} has no precomputed voices")

    def stored_voice(self, voice: PrecomputedVoice) -> StoredVoice:
        if not isinstance(voice, CodesVoice):
            raise SkipVoice(f"{self.rules.name} has no precomputed voices")
        return StoredVoice(voice.name, ref_text=voice.ref_text, family=voice.model_type, models=voice.models,
                           precomputed=voice.ref_codes)


# --- planning helpers --------------------------------------------------------------------------------------


def transcript(text: str | None) -> str | None:
    """A transcript as given; None when absent or blank."""
    return text if text and text.strip() else None


def voice_name(f: SpeechFields) -> str | None:
    """The request's `voice`, stripped (400 beyond 256 characters); None when omitted or blank."""
    return (text_field(f.voice, "voice", 256) or "").strip() or None


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


def requested_voice(f: SpeechFields, ckpt: ServedCheckpoint, deployment: PlanContext, default: str,
                    unknown: str | None = None, fits: str | None = None, own: str = "own voice") -> StoredVoice | None:
    """The stored voice a request names for a family whose only other voice is its own `default` (None: the
    `voice` is omitted, blank or `default`, any case); a 400 naming `voice` as `stored_voice_of` says (`unknown`,
    by default: use an uploaded voice or the model's `own` voice)."""
    voice = voice_name(f)
    if voice is None or voice.lower() == default:
        return None
    if unknown is None:
        unknown = (f"Invalid voice '{f.voice}' for {ckpt.rules.name}: use an uploaded voice, or omit 'voice' (or "
                   f"'{default}') for the model's {own}")
    return stored_voice_of(deployment, voice.lower(), ckpt, unknown, fits)


@dataclass(frozen=True)
class Reference:
    """What a request clones from: its clip (`ref_audio` as sent), the clip's transcript, the stored voice."""

    ref_audio: str | None
    ref_text: str | None
    stored: StoredVoice | None

    @property
    def cloning(self) -> bool:
        return self.ref_audio is not None or self.stored is not None


def clone_reference(f: SpeechFields, stored: StoredVoice | None, transcript_chars: int = MAX_REF_TEXT_CHARS,
                    required: str | None = None) -> Reference:
    """The clip and transcript of a request: `ref_audio` overrides a stored voice (spec); a stored voice's own
    transcript stands in for a missing `ref_text`; with neither a clip nor a stored voice, a family that always
    clones says `required` (400 naming `ref_audio`), and a `ref_text` is a 400 naming it. A blank transcript
    counts as none."""
    ref_audio = text_field(f.ref_audio, "ref_audio", 1 << 30)
    ref_text = transcript(text_field(f.ref_text, "ref_text", transcript_chars))
    if ref_audio is not None:
        return Reference(ref_audio, ref_text, None)
    if stored is None:
        if required is not None:
            raise bad_request(required, "ref_audio")
        if ref_text is not None:
            raise bad_request("'ref_text' is the transcript of 'ref_audio': give 'ref_audio' too", "ref_text")
        return Reference(None, None, None)
    return Reference(None, ref_text if ref_text is not None else transcript(stored.ref_text), stored)


def checked_limits(f: SpeechFields, rules: FamilyRules) -> tuple[int | None, int | None, int | None]:
    """`max_new_tokens`, `initial_codec_chunk_frames` (a family without that field: None) and `seed` of a
    request, checked in that order (400 naming the field); None where not given."""
    try:
        max_new = rules.field("max_new_tokens").check(f.max_new_tokens)
        initial = (rules.field("initial_codec_chunk_frames").check(f.initial_codec_chunk_frames)
                   if rules.has_field("initial_codec_chunk_frames") else None)
        return max_new, initial, rules.field("seed").check(f.seed)
    except InvalidRequest as exc:
        raise from_invalid_request(exc) from None


def segments_of(text: str, deployment: PlanContext) -> tuple[str, ...]:
    """A long `input`'s segments (gateway.longtext; one a sentence with word timestamps), or () when it is one
    generation."""
    parts = (split_sentences(text, deployment.segment_chars) if deployment.segment_by_sentence
             else split_segments(text, deployment.segment_chars))
    return tuple(parts) if len(parts) > 1 else ()


def facts_of(ckpt: ServedCheckpoint, kind: type[F]) -> F:
    """A checkpoint's manifest facts as its family reads them (the family's defaults when it has none)."""
    return ckpt.facts if isinstance(ckpt.facts, kind) else kind()


# --- clips through a feature model -------------------------------------------------------------------------


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


# --- precomputed voices of reference codes -------------------------------------------------------------------


@dataclass(frozen=True)
class CodecFacts(FamilyFacts):
    """A checkpoint's codec, as precomputed voices of its codes are checked against it."""

    codec_sha256: str | None = None  # the checksum of the codec weights


@dataclass(frozen=True)
class CodecTarget:
    """A served checkpoint as precomputed voices of codec codes are checked against it."""

    name: str
    codec_sha256: str | None


def codec_targets(checkpoints: Sequence[ServedCheckpoint], family: str) -> dict[str, Any]:
    """`precomputed_checks` of a family of codes voices: each of its served checkpoints' codec checksum."""
    return {"targets": [CodecTarget(c.name, facts_of(c, CodecFacts).codec_sha256)
                        for c in checkpoints if c.family == family]}


def codec_models(entry: Mapping[str, Any], targets: Sequence[CodecTarget], identity_key: str,
                 family_name: str) -> tuple[str, ...] | None:
    """The served checkpoints a precomputed voice fits: those whose codec checksum is the one its entry's
    `checkpoint` identity records under `identity_key` (fits when either is unknown); None when there is
    nothing to check against; SkipVoice naming both sides when none fits."""
    if not targets:
        return None
    recorded = entry.get("checkpoint")
    identity: Mapping[str, Any] = recorded if isinstance(recorded, dict) else {}
    sha = identity.get(identity_key) if isinstance(identity.get(identity_key), str) else None
    models = tuple(t.name for t in targets if sha is None or t.codec_sha256 is None or t.codec_sha256 == sha)
    if not models:
        made = identity.get("name") or "another checkpoint"
        raise SkipVoice(f"made for {made} (codec {sha}); the served {family_name} models' codecs are "
                        + ", ".join(f"{t.name} ({t.codec_sha256 or 'unknown'})" for t in targets))
    return models


@dataclass(frozen=True)
class CodesVoice(PrecomputedVoice):
    """A precomputed voice of reference codes (and, as every voice, its ref_text): the StoredVoice's
    `precomputed` is the codes (BaseAdapter.stored_voice)."""

    ref_codes: np.ndarray | None = None  # int64, read only (shared between requests)


class CodecVoicesAdapter(BaseAdapter):
    """A family whose precomputed voices are reference codes of its codec (a voice file entry's `ref_code`),
    each fitting the served checkpoints whose codec made it (their CodecFacts). A family declares its
    `voice_modes` and the `codec_identity_key` its voice files record the codec under, and says how it checks
    a file's codes (`checked_codes`: by default a [frames, groups] grid of codes below the codebook size, its
    `code_grid`) and reads its transcript (`voice_transcript`)."""

    voice_modes: tuple[str, ...]  # the voice file's modes (the first: the default)
    codec_identity_key: str
    code_grid: tuple[int, int] | None = None  # (codebooks per frame, codebook size) for the default checked_codes
    clip_codes = True

    def precomputed_checks(self, checkpoints: Sequence[ServedCheckpoint]) -> dict[str, Any]:
        """Every served checkpoint of the family's codec checksum (a voice fits those with its codec)."""
        return codec_targets(checkpoints, self.family)

    def precomputed_voice(self, root: Path, raw_name: Any, entry: Any,
                          targets: Sequence[CodecTarget] = ()) -> PrecomputedVoice:
        """A voice file entry's codes and transcript, checked against the served checkpoints' codec."""
        name, mode, path, tensors = read_entry(root, raw_name, entry, self.voice_modes, self.voice_modes[0])
        stored = tensors.get(REF_CODE)
        if stored is None:
            raise SkipVoice(f"missing tensor {REF_CODE!r}")
        codes = self.checked_codes(stored)
        ref_text = self.voice_transcript(entry)
        models = codec_models(entry, targets, self.codec_identity_key, self.rules.name)
        ref_codes = np.ascontiguousarray(codes.astype(np.int64))
        ref_codes.setflags(write=False)  # shared between requests
        return CodesVoice(name=name, mode=mode, features=None, path=path, ref_text=ref_text,
                          speaker_description=description(entry), model_type=self.family, models=models,
                          ref_codes=ref_codes)

    def checked_codes(self, stored: np.ndarray) -> np.ndarray:
        """A voice file's `ref_code` tensor as the family sends it; SkipVoice naming what is wrong."""
        if self.code_grid is None:
            raise NotImplementedError
        try:
            triton_io.code_grid(stored, *self.code_grid, REF_CODE)
        except InvalidRequest as e:
            raise SkipVoice(str(e)) from None
        return stored

    def voice_transcript(self, entry: Mapping[str, Any]) -> str | None:
        """A voice file entry's transcript (SkipVoice when the family needs one and it has none); by default an
        optional one, stripped (None when absent or blank)."""
        text = entry.get("ref_text")
        return text.strip() if isinstance(text, str) and text.strip() else None


__all__ = ["NO_FACTS", "BaseAdapter", "CodecFacts", "CodecTarget", "CodecVoicesAdapter", "CodesVoice", "Reference",
           "checked_limits", "clone_reference", "codec_models", "codec_targets", "encode_clip", "facts_of",
           "requested_voice", "segments_of", "stored_voice_of", "transcript", "voice_name"]
