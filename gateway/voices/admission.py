"""What the uploaded-voice store admits: its limits from the spec's environment variables (a bad policy or
duration fails start-up), the checks of an upload's text fields, and the admission rule of a name
(reserved by a built-in or precomputed voice; taken, under the `immutable` policy; the SPEAKER_MAX_UPLOADED
cap, which replacing a voice does not count against)."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Container, Mapping
from dataclasses import dataclass
from pathlib import Path

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import voice_key

from .errors import VoiceSettingsError

logger = logging.getLogger(__name__)

POLICY_OVERWRITE = "overwrite"
POLICY_IMMUTABLE = "immutable"
POLICIES = (POLICY_OVERWRITE, POLICY_IMMUTABLE)

ENV_SAMPLES_DIR = "SPEAKER_SAMPLES_DIR"
ENV_MAX_UPLOADED = "SPEAKER_MAX_UPLOADED"
ENV_POLICY = "VLLM_OMNI_SPEAKER_REGISTRATION_POLICY"
ENV_MAX_DURATION = "SPEAKER_MAX_DURATION_S"  # project extension (not in the spec)
ENV_MIN_DURATION = "SPEAKER_MIN_DURATION_S"  # project extension (not in the spec)

DEFAULT_SAMPLES_DIR = "~/.cache/vllm-omni/speakers"
DEFAULT_MAX_UPLOADED = 1000
DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024  # the spec's 10 MB upload limit
DEFAULT_MAX_DURATION_S = 30.0
DEFAULT_MIN_DURATION_S = 1.0
MAX_CONSENT_CHARS = 256
MAX_REF_TEXT_CHARS = 4096
MAX_DESCRIPTION_CHARS = 1024


@dataclass(frozen=True)
class VoiceStoreSettings:
    directory: Path
    max_uploaded: int = DEFAULT_MAX_UPLOADED
    policy: str = POLICY_OVERWRITE
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_duration_s: float = DEFAULT_MAX_DURATION_S
    min_duration_s: float = DEFAULT_MIN_DURATION_S

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> VoiceStoreSettings:
        """The spec's environment variables; a bad policy or duration fails start-up."""
        env = os.environ if env is None else env
        directory = Path(env.get(ENV_SAMPLES_DIR) or DEFAULT_SAMPLES_DIR).expanduser()
        raw_cap = (env.get(ENV_MAX_UPLOADED) or "").strip()
        max_uploaded = DEFAULT_MAX_UPLOADED
        if raw_cap:
            try:
                max_uploaded = int(raw_cap)
            except ValueError:
                logger.warning("Invalid %s=%r; using default %d", ENV_MAX_UPLOADED, raw_cap, DEFAULT_MAX_UPLOADED)
        return cls(
            directory=directory,
            max_uploaded=max_uploaded,
            policy=parse_policy(env.get(ENV_POLICY)),
            max_duration_s=_env_seconds(env, ENV_MAX_DURATION, DEFAULT_MAX_DURATION_S),
            min_duration_s=_env_seconds(env, ENV_MIN_DURATION, DEFAULT_MIN_DURATION_S, allow_zero=True),
        )


def parse_policy(raw: str | None) -> str:
    value = (raw or "").strip().lower()
    if not value:
        return POLICY_OVERWRITE
    if value not in POLICIES:
        raise VoiceSettingsError(f"{ENV_POLICY}={raw!r} is invalid: use 'overwrite' (default) or 'immutable'")
    return value


def _env_seconds(env: Mapping[str, str], name: str, default: float, allow_zero: bool = False) -> float:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise VoiceSettingsError(f"{name}={raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise VoiceSettingsError(f"{name}={raw!r} must be a {'non-negative' if allow_zero else 'positive'} number")
    return value


# --- an upload's fields -------------------------------------------------------------------------------------


def required_text(value: str | None, param: str, max_chars: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(f"{param} is required", param)
    return _bounded(value.strip(), param, max_chars)


def optional_text(value: str | None, param: str, max_chars: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequest(f"{param} must be a string", param)
    return _bounded(value.strip(), param, max_chars) or None


def _bounded(value: str, param: str, max_chars: int) -> str:
    if len(value) > max_chars:
        raise InvalidRequest(f"{param} is too long ({len(value)} characters, at most {max_chars})", param)
    if "\x00" in value:
        raise InvalidRequest(f"{param} must not contain NUL characters", param)
    return value


# --- a name -------------------------------------------------------------------------------------------------


def check_admission(name: str, *, reserved: Container[str], registered: Container[str], count: int, policy: str,
                    max_uploaded: int) -> None:
    """May `name` be registered now (`registered`: the keys of the voices there are, `count` of them)?
    InvalidRequest naming `name` when not."""
    key = voice_key(name)
    if key in reserved:
        raise InvalidRequest(
            f"Voice name '{name}' is already used by a built-in or precomputed voice; choose another name", "name"
        )
    if key in registered:
        if policy == POLICY_IMMUTABLE:
            raise already_exists(name)
        return  # overwrite: replacing a voice does not grow the registry
    if count >= max_uploaded:
        raise InvalidRequest(
            f"Uploaded voice limit reached ({max_uploaded}). Delete an existing voice before "
            f"registering a new one, or raise the cap via {ENV_MAX_UPLOADED}.",
            "name",
        )


def already_exists(name: str) -> InvalidRequest:
    return InvalidRequest(
        f"Voice '{name}' already exists; delete it (DELETE /v1/audio/voices/{name}) before registering it again",
        "name",
    )


__all__ = ["DEFAULT_MAX_UPLOADED", "ENV_MAX_DURATION", "ENV_MAX_UPLOADED", "ENV_MIN_DURATION", "ENV_POLICY",
           "ENV_SAMPLES_DIR", "MAX_CONSENT_CHARS", "MAX_DESCRIPTION_CHARS", "MAX_REF_TEXT_CHARS", "POLICIES",
           "POLICY_IMMUTABLE", "POLICY_OVERWRITE", "VoiceStoreSettings", "already_exists", "check_admission",
           "optional_text", "parse_policy", "required_text"]
