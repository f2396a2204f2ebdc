"""A model family's request rules, declared once as data and checked the same way on both sides.

The gateway checks a request against its family's `FamilyRules` in API field names before any work
starts; the family's runtime checks what reaches it over gRPC with the same rules, so a direct
Triton client gets the same message for the same mistake. `InvalidRequest.param` names the field.
"""

from __future__ import annotations

import math
import numbers
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ttscore.contract.errors import InvalidRequest

SEED_MAX = 2**63 - 1  # the Speech API's `seed`: any non-negative int64

# --- runaway guard ---------------------------------------------------------------------------------
# A model that fails to emit its stop (random weights; real checkpoints now and then) would run to
# max_new_tokens: minutes of audio for a short sentence. The engine (ttscore.runtime.engine) ends such a
# generation with finish_reason "length" once its audio passes `runaway_frames`: RUNAWAY_MIN_S plus
# `factor` times the family's typical speech per text token (FamilyRules.seconds_per_text_token) times
# the request's text tokens (its usage's, instructions included). max_new_tokens still caps it.
# The defaults are generous: ordinary speech takes 0.2-0.4 s per BPE token, so a 4x factor plus ten
# seconds leaves room for slow styles and long pauses; speech_generation's runaway_factor and
# runaway_min_s (triton-tts serve --runaway-factor / --runaway-min-s) change them, factor 0 turns it off.
TYPICAL_SECONDS_PER_TEXT_TOKEN = 0.3  # a BPE / SentencePiece token of ordinary speech
DEFAULT_RUNAWAY_FACTOR = 4.0
DEFAULT_RUNAWAY_MIN_S = 10.0


def runaway_frames(seconds_per_token: float | None, text_tokens: int, frame_seconds: float,
                   factor: float = DEFAULT_RUNAWAY_FACTOR, min_s: float = DEFAULT_RUNAWAY_MIN_S) -> int | None:
    """The most frames a generation of `text_tokens` text tokens may make before the runaway guard ends it
    (None: no guard: the factor is 0, or the family has no rate, its length being fixed before it starts)."""
    if seconds_per_token is None or factor <= 0 or frame_seconds <= 0:
        return None
    seconds = min_s + factor * seconds_per_token * max(0, text_tokens)
    return max(1, math.ceil(seconds / frame_seconds))


@dataclass(frozen=True)
class FieldRule:
    """An integer knob: accepted range (inclusive) and the default when the request leaves it out."""

    name: str  # the Speech API field name
    lo: int
    hi: int
    default: int | None

    def check(self, value: object) -> int | None:
        """The value as an int (None stays None), or InvalidRequest naming the field."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):  # numpy integers pass
            raise InvalidRequest(f"'{self.name}' must be an integer", self.name)
        v = int(value)
        if not self.lo <= v <= self.hi:
            raise InvalidRequest(f"'{self.name}' must be between {self.lo} and {self.hi}, got {v}", self.name)
        return v

    def resolve(self, value: object) -> int:
        """Checked value, or the default."""
        checked = self.check(value)
        if checked is not None:
            return checked
        if self.default is None:
            raise InvalidRequest(f"Missing required parameter: '{self.name}'", self.name)
        return self.default

    def checked_or_drawn(self, value: object) -> int:
        """The checked value, or one drawn (`draw`) when the request gives none."""
        checked = self.check(value)
        return self.draw() if checked is None else checked

    def draw(self, cap: int | None = None) -> int:
        """A value drawn from entropy in [lo, min(hi, cap)]: the seed of a request that gave none, where
        the family has no default seed (its audio is random, as the request asked)."""
        hi = self.hi if cap is None else min(self.hi, cap)
        return self.lo + secrets.randbelow(hi - self.lo + 1)


def checked_float(value: object, param: str, lo: float, hi: float, lo_open: bool = False) -> float:
    """A runtime request's number as a float in [lo, hi] ((lo, hi] where `lo_open`); InvalidRequest naming `param`
    otherwise (not a number, not finite, outside)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise InvalidRequest(f"{param} must be a number", param)
    v = float(value)
    if not np.isfinite(v) or v > hi or v < lo or (lo_open and v == lo):
        interval = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
        raise InvalidRequest(f"{param} must be in {interval}, got {value}", param)
    return v


def seed_field(default: int | None = None) -> FieldRule:
    """The Speech API's `seed` field as every family takes it: 0..SEED_MAX, `default` when a request has none
    (None: no seed, see FamilyRules.draws_seed)."""
    return FieldRule("seed", 0, SEED_MAX, default)


def budget_and_seed(limit: int, default: int | None, seed: int | None = None) -> tuple[FieldRule, FieldRule]:
    """The fields of a family whose requests take no others: `max_new_tokens` 1..limit (`default` when a request
    has none; None: the family's own rule) and `seed` (seed_field(seed))."""
    return FieldRule("max_new_tokens", 1, limit, default), seed_field(seed)


@dataclass(frozen=True)
class RefAudioBounds:
    """What a family accepts as a reference clip (voice cloning, uploads): sample rates and length."""

    min_rate: int = 8000
    max_rate: int = 192000
    min_seconds: float = 0.1
    max_seconds: float = 60.0

    def widest(self, other: RefAudioBounds) -> RefAudioBounds:
        """Bounds that admit a clip either admits (uploads: a voice may serve any family)."""
        return RefAudioBounds(min(self.min_rate, other.min_rate), max(self.max_rate, other.max_rate),
                              min(self.min_seconds, other.min_seconds), max(self.max_seconds, other.max_seconds))


@dataclass(frozen=True)
class KnobRule:
    """A number the Speech API's `extra_params` carries to a family's generation (a sampling or solver knob):
    the range [lo, hi] (`lo_open`: lo itself excluded), an integer where `integer`. A value outside it is
    refused naming `extra_params`, never clamped. A `boolean` knob takes only true or false (lo and hi unused)."""

    name: str
    lo: float
    hi: float
    integer: bool = False
    lo_open: bool = False
    boolean: bool = False

    def check(self, value: object) -> int | float:
        v: Any = value
        if self.boolean:
            if not isinstance(value, bool):
                raise InvalidRequest(f"'extra_params': '{self.name}' must be true or false, got {value!r}",
                                     "extra_params")
            return value
        if self.integer:
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        else:
            ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))
        if ok:
            x = float(v)
            ok = (self.lo < x if self.lo_open else self.lo <= x) and x <= self.hi
        if not ok:
            kind = "an integer" if self.integer else "a number"
            if self.lo == self.hi:
                bounds = f"{kind} equal to {self.lo:g}"
            elif self.lo_open:
                bounds = f"{kind} with {self.lo:g} < {self.name} <= {self.hi:g}"
            else:
                bounds = f"{kind} between {self.lo:g} and {self.hi:g}"
            raise InvalidRequest(f"'extra_params': '{self.name}' must be {bounds}, got {value!r}", "extra_params")
        return int(v) if self.integer else float(v)


# How a family's audio depends on its request (FamilyRules.sampling): what reproducing a request takes.
# A reproducible request can be replayed (the gateway re-runs a stream whose Triton died on another one
# and skips what the client already has); for SEEDED families without a default seed the gateway draws
# one when the client gave none, so that every request of theirs is reproducible.
SEEDED = "seeded"  # every random draw comes from the request's seed: same inputs and seed, same audio
GREEDY = "greedy"  # no random draw at all: same inputs, same audio (a seed is accepted and moot)
UNSEEDED = "unseeded"  # randomness the seed does not control: a request cannot be reproduced
SAMPLING = (SEEDED, GREEDY, UNSEEDED)


@dataclass(frozen=True)
class FamilyRules:
    family: str
    tasks: tuple[str, ...]  # the Speech API task types the family serves
    fields: tuple[FieldRule, ...]
    exclusive: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # task -> fields only it accepts
    required: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # task -> fields it needs
    display_name: str = ""  # what messages call the family (default: `family`)
    # Speech API fields the family does not take: a request giving one is refused (400 naming it).
    unsupported: tuple[str, ...] = ()
    default_voice: str | None = None  # the voice a request without one gets (None: the model's own)
    ref_audio: RefAudioBounds = field(default_factory=RefAudioBounds)
    max_text_chars: int = 4096  # per generation
    sample_rate: int | None = None  # of the audio the family generates (the manifest's wins when it has one)
    # checkpoint variant (manifest) -> its task; default for a family of one task: {"base": that task}
    variants: Mapping[str, str] = field(default_factory=dict)
    # The knobs the family takes in the Speech API's `extra_params` (any other key: 400 naming it).
    extra_params: tuple[KnobRule, ...] = ()
    # Whether `language` "Auto" (the spec's default: no language) is accepted. False for a family that
    # refuses `language` outright, "Auto" included; what /v1/models lists follows it.
    auto_language: bool = True
    # SEEDED, GREEDY or UNSEEDED (above). Not declared: UNSEEDED, never replayed.
    sampling: str = UNSEEDED
    # The runaway guard's rate (`runaway_frames`): audio seconds of ordinary speech per text token. None: the
    # family decides its length before it generates (non-autoregressive), so it cannot run away.
    seconds_per_text_token: float | None = TYPICAL_SECONDS_PER_TEXT_TOKEN

    def __post_init__(self) -> None:
        if not self.variants and len(self.tasks) == 1:
            object.__setattr__(self, "variants", {"base": self.tasks[0]})
        if self.sampling not in SAMPLING:
            raise ValueError(f"{self.family}: sampling must be one of {', '.join(SAMPLING)}, got {self.sampling!r}")

    @property
    def name(self) -> str:
        return self.display_name or self.family

    @property
    def reproducible(self) -> bool:
        """Does the same request (inputs and seed) give the same audio, on any server and in any batch?"""
        return self.sampling != UNSEEDED

    @property
    def draws_seed(self) -> bool:
        """Must a request without a seed be given one to be reproducible (a seeded family without a
        default seed: the model would draw its noise from entropy)?"""
        return self.sampling == SEEDED and self.has_field("seed") and self.field("seed").default is None

    @property
    def knob_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.extra_params)

    def knobs(self, extra: Mapping[str, object] | None) -> dict[str, int | float]:
        """The request's `extra_params`, checked (InvalidRequest naming `extra_params` for a key the family
        does not take or a value outside its rule)."""
        if extra is None:
            return {}
        if not self.extra_params:  # as for any field the API does not know
            raise InvalidRequest("Unrecognized request argument supplied: 'extra_params'", "extra_params")
        rules = {k.name: k for k in self.extra_params}
        out: dict[str, int | float] = {}
        for key, value in extra.items():
            if key not in rules:
                raise InvalidRequest(f"'extra_params' key '{key}' is not supported by {self.name} models (it takes "
                                     f"{', '.join(rules)})", "extra_params")
            out[key] = rules[key].check(value)
        return out

    def request_knobs(self, request: object, defaults: Mapping[str, int | float]) -> dict[str, int | float]:
        """A runtime request's knobs: its attributes named as the `extra_params` rules, each one it gives (not None)
        checked by its KnobRule (as `knobs`: InvalidRequest naming `extra_params`), `defaults` for the rest."""
        given = {k.name: getattr(request, k.name) for k in self.extra_params if getattr(request, k.name) is not None}
        return {**defaults, **(self.knobs(given) if given else {})}

    def checked_text(self, text: object, param: str = "input") -> str:
        """The text of one generation: a non-empty string of at most `max_text_chars` characters (InvalidRequest
        naming `param` otherwise). The runtimes' check of a request's text."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidRequest(f"'{param}' must be a non-empty string", param)
        if len(text) > self.max_text_chars:
            raise InvalidRequest(f"'{param}' is longer than {self.max_text_chars} characters", param)
        return text

    def field(self, name: str) -> FieldRule:
        for rule in self.fields:
            if rule.name == name:
                return rule
        raise KeyError(name)

    def has_field(self, name: str) -> bool:
        return any(rule.name == name for rule in self.fields)

    def check_task_fields(self, task: str, given: Mapping[str, object]) -> None:
        """Cross-field rules: fields only one task accepts (e.g. cloning inputs), each task's required fields."""
        for owner, names in self.exclusive.items():
            if task == owner:
                continue
            for name in names:
                if given.get(name) is not None:
                    raise InvalidRequest(f"'{name}' is only valid for {owner} task", name)
        for name in self.required.get(task, ()):
            value = given.get(name)
            if not (isinstance(value, str) and value.strip()):
                raise InvalidRequest(f"{task} task requires '{name}'", name)
