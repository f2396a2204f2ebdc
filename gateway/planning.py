"""Speech request -> a fully resolved plan: defaults, validation, task inference, routing (pure).

Input is the contract's fields (`SpeechFields`, already type-checked by the protocol models);
output is a `SpeechPlan` naming the served checkpoint, every generation input and the output
format, or an `APIError` (400/404) naming the field. Nothing here talks to Triton, so a request
that fails planning never starts work on the server.

What differs between families (which fields a family takes, its voices, defaults and task
routing) is its adapter's (gateway.family, gateway.families): `plan_speech` checks the input text
and `model`, then hands the request to the adapter of the checkpoint `model` names, or, without
`model`, of the first served family that routes requests by task. The deployment is the adapters'
`PlanContext` (gateway.family).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from ttscore.contract.errors import InvalidRequest

from . import word_timing
from .aliases import DEFAULT_MODEL_ALIASES, effective_voice_aliases
from .errors import bad_request, from_invalid_request, model_not_found
from .family import ServedCheckpoint, SpeechPlan, default_voice_aliases
from .settings import DEFAULT_MAX_INPUT_CHARS, DEFAULT_SEGMENT_CHARS
from .speech_fields import (  # noqa: F401  (the planning vocabulary, re-exported for the service and tests)
    MAX_INSTRUCTIONS_CHARS,
    MAX_REF_TEXT_CHARS,
    OutputSpec,
    SpeechFields,
    StoredVoice,
    plan_output,
    refuse_unsupported,
    text_field,
)


class VoiceResolver(Protocol):
    def resolve_voice(self, name: str) -> StoredVoice | None: ...

    def uploaded_voices(self) -> list[dict[str, Any]]: ...


class NoStoredVoices:
    """Until voice upload exists: no stored voices."""

    def resolve_voice(self, name: str) -> StoredVoice | None:
        return None

    def uploaded_voices(self) -> list[dict[str, Any]]:
        return []



class Deployment:
    """The served checkpoints, in deployment order, the stored-voice hook, the OpenAI aliases
    (gateway.aliases), the input limits (gateway.longtext) and the forced aligner (gateway.word_timing)."""

    def __init__(self, checkpoints: Sequence[ServedCheckpoint], voices: VoiceResolver | None = None, *,
                 model_aliases: Mapping[str, str | None] | None = None,
                 voice_aliases: Mapping[str, str] | None = None,
                 max_input_chars: int = DEFAULT_MAX_INPUT_CHARS, segment_chars: int = DEFAULT_SEGMENT_CHARS,
                 aligner_model: str | None = None) -> None:
        if not checkpoints:
            raise ValueError("a deployment needs at least one checkpoint")
        self.checkpoints = tuple(checkpoints)
        self.voices: VoiceResolver = voices or NoStoredVoices()
        self.model_aliases: dict[str, str | None] = dict(DEFAULT_MODEL_ALIASES if model_aliases is None
                                                         else model_aliases)
        defaults = default_voice_aliases(dict.fromkeys(c.adapter for c in self.checkpoints))
        self.voice_aliases: dict[str, str] = effective_voice_aliases(voice_aliases, self.builtin_voices(), defaults)
        self.max_input_chars = max_input_chars
        self.segment_chars = segment_chars
        self.aligner_model = aligner_model  # word timestamps (gateway.word_timing); None: no aligner deployed
        self.segment_by_sentence = False  # see word_timestamps_context

    def word_timestamps_context(self) -> Deployment:
        """This deployment as a request with word timestamps plans against it: one sentence a segment
        (gateway.longtext.split_sentences), so each sentence's words follow its audio."""
        view = copy.copy(self)
        view.segment_by_sentence = True
        return view

    def find_model(self, model: str) -> ServedCheckpoint | None:
        """The checkpoint `model` names: its id, one of its aliases, or a model alias pinned to it."""
        target = self.model_aliases.get(model) if model in self.model_aliases else model
        if target is None:
            return None
        for ckpt in self.checkpoints:
            if ckpt.answers_to(target):
                return ckpt
        return None

    def routes_by_default(self, model: str) -> bool:
        """`model` is an alias with no target: the request is routed as if it named no model."""
        return model in self.model_aliases and self.model_aliases[model] is None

    def knows_model(self, model: str) -> bool:
        return self.routes_by_default(model) or self.find_model(model) is not None

    def default_model(self) -> ServedCheckpoint:
        """Where a request without `model` and with a preset voice goes: the first checkpoint of the
        default task of a family routed by task (e.g. the first CustomVoice checkpoint)."""
        return next((c for c in self.routed_by_task() if c.adapter.routes_by_task and c.task == c.adapter.default_task),
                    self.checkpoints[0])

    def routed_by_task(self) -> list[ServedCheckpoint]:
        """The checkpoints a request without `model` is routed among (by task): those of the families
        that route by task when any is served (other families answer when `model` names them), else all."""
        routed = [c for c in self.checkpoints if c.adapter.routes_by_task]
        return routed or list(self.checkpoints)

    def builtin_voices(self) -> list[str]:
        return sorted({s for c in self.checkpoints for s in c.speakers})

    def preset_voice(self, name: str) -> str:
        """A voice alias's preset speaker; any other name unchanged (presets are never re-mapped)."""
        return self.voice_aliases.get(name, name)

    def resolve_voice(self, name: str) -> StoredVoice | None:
        """The hook for uploaded/precomputed voices (None: not a stored voice)."""
        return self.voices.resolve_voice(name)



# --- the planner -------------------------------------------------------------------------------


def plan_speech(f: SpeechFields, deployment: Deployment) -> SpeechPlan:
    """Validate and route one request. Raises APIError (400/404) naming the field."""
    return reproducible_plan(with_word_timestamps(route_speech(f, deployment), f, deployment))


def route_speech(f: SpeechFields, deployment: Deployment) -> SpeechPlan:
    """The request validated and routed to its checkpoint, before its seed is drawn and its words planned (what
    admission control needs). Raises APIError (400/404) naming the field."""
    text = text_field(f.input, "input", deployment.max_input_chars, required=True,
                      empty_message="Input text cannot be empty")
    if text is None or not text.strip():
        raise bad_request("Input text cannot be empty", "input")

    named: ServedCheckpoint | None = None
    if f.model is not None and not deployment.routes_by_default(f.model):
        named = deployment.find_model(f.model)
        if named is None:
            raise model_not_found(f.model)

    first = deployment.routed_by_task()[0]
    if named is None and not first.adapter.routes_by_task:
        named = first  # only families that answer when named are served: the first one
    rules = (named or first).adapter.rules
    try:
        rules.knobs(f.extra_params)  # keys and values; the adapter takes the checked values again
    except InvalidRequest as exc:
        raise from_invalid_request(exc) from None
    context = deployment.word_timestamps_context() if f.word_timestamps is True else deployment
    return (named or first).adapter.plan(f, named, text, context)  # refuses a family's unsupported fields


def with_word_timestamps(plan: SpeechPlan, f: SpeechFields, deployment: Deployment) -> SpeechPlan:
    """The plan aligning its words when the request asks (`word_timestamps: true`) and the family took it
    (its adapter refuses it otherwise); a 400 naming it without an aligner in the deployment."""
    if f.word_timestamps is not True:
        return plan
    if deployment.aligner_model is None:
        raise bad_request("'word_timestamps' needs a forced aligner, and this deployment has none: "
                          + word_timing.ENABLE_HINT + ".", "word_timestamps")
    return replace(plan, aligner_model=deployment.aligner_model,
                   text_offsets=word_timing.text_offsets(f.input or "", plan.texts))


def refuse_raw_word_timestamps(plan: SpeechPlan) -> None:
    """An HTTP response of raw audio bytes (stream_format='audio') has no place for words: 400 naming
    `word_timestamps` (the WebSocket frames its audio itself and sends words in messages)."""
    if plan.aligner_model is not None and plan.output.stream == "audio":
        raise bad_request("'word_timestamps' needs a response that carries them: a whole file (JSON), SSE "
                          "(stream_format='sse') or the WebSocket /v1/audio/speech/stream; not raw audio bytes.",
                          "word_timestamps")


# A drawn seed stays a safe integer everywhere a client may send it back (JSON numbers in JavaScript).
DRAWN_SEED_MAX = 2**31 - 1


def reproducible_plan(plan: SpeechPlan) -> SpeechPlan:
    """The plan, given a seed the gateway draws when its family needs one to be reproducible and
    the client gave none (FamilyRules.draws_seed): such a request was random anyway, and now it can
    be replayed (gateway.replay). A client's seed, a family's default seed and greedy families are
    left as they are, so their audio does not change."""
    rules = plan.checkpoint.rules
    if plan.seed is not None or not rules.draws_seed:
        return plan
    return replace(plan, seed=rules.field("seed").draw(DRAWN_SEED_MAX), seed_drawn=True)



__all__ = [
    "DRAWN_SEED_MAX",
    "Deployment",
    "NoStoredVoices",
    "OutputSpec",
    "SpeechFields",
    "SpeechPlan",
    "StoredVoice",
    "VoiceResolver",
    "plan_output",
    "plan_speech",
    "refuse_raw_word_timestamps",
    "refuse_unsupported",
    "reproducible_plan",
    "route_speech",
    "text_field",
]
