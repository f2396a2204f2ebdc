"""OpenAI drop-in names: model aliases and voice aliases (pure).

An app written for OpenAI sends `model="tts-1"` (or `tts-1-hd`, `gpt-4o-mini-tts`) and one of
OpenAI's voice names. Both map onto what this deployment serves:

- `model_aliases` (gateway config): alias -> a served model id, or null. A null target (the default
  for OpenAI's three names) makes the alias behave exactly like an omitted `model`: the request is
  routed by task and voice, so preset voices go to the default served model (the first CustomVoice
  checkpoint, else the first served) and uploaded voices to the Base checkpoint. A named target
  pins the alias to that model (its task rules apply, as for the model's own id).
- `voice_aliases` (gateway config): OpenAI voice name -> a preset speaker of a served checkpoint.
  A voice name that is a served preset or a stored (uploaded/precomputed) voice is never re-mapped;
  uploads cannot take an alias's name. The defaults are the served families' own (their gateway
  adapters' `voice_aliases`, e.g. OpenAI's voices -> Qwen3-TTS CustomVoice presets); default aliases
  whose speaker is not served are dropped (a deployment without preset speakers has none); a
  configured one is an error at startup.

Unknown names keep the spec's errors (404 for `model`, 400 for `voice`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# OpenAI's TTS model ids.
DEFAULT_MODEL_ALIASES: dict[str, str | None] = {"tts-1": None, "tts-1-hd": None, "gpt-4o-mini-tts": None}

class AliasError(ValueError):
    """A configured alias is unusable (the settings loader turns it into a SettingsError)."""


def parse_model_aliases(raw: Any) -> dict[str, str | None]:
    if not isinstance(raw, Mapping):
        raise AliasError("model_aliases must be an object: alias -> served model id (or null: the default routing)")
    out: dict[str, str | None] = {}
    for alias, target in raw.items():
        if not isinstance(alias, str) or not alias.strip():
            raise AliasError(f"model alias {alias!r} must be a non-empty string")
        if target is not None and (not isinstance(target, str) or not target):
            raise AliasError(f"model alias {alias!r}: the target must be a served model id or null")
        out[alias] = target
    return out


def parse_voice_aliases(raw: Any) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        raise AliasError("voice_aliases must be an object: voice name -> preset speaker")
    out: dict[str, str] = {}
    for alias, target in raw.items():
        if not isinstance(alias, str) or not alias.strip() or not isinstance(target, str) or not target.strip():
            raise AliasError(f"voice alias {alias!r} -> {target!r}: both must be non-empty strings")
        out[alias.strip().lower()] = target.strip().lower()
    return out


def effective_voice_aliases(configured: Mapping[str, str] | None, speakers: Iterable[str],
                            defaults: Mapping[str, str]) -> dict[str, str]:
    """The voice aliases in force for the served preset `speakers` (lower-case).

    `configured` None: the `defaults` (the served families'), keeping those whose speaker is served.
    A configured alias whose speaker is not served raises AliasError (a typo should not surface as a
    400 later)."""
    served = set(speakers)
    if configured is None:
        return {a: s for a, s in defaults.items() if s in served and a not in served}
    missing = sorted(f"{a} -> {s}" for a, s in configured.items() if s not in served)
    if missing:
        raise AliasError(f"voice_aliases name speakers no served CustomVoice model has: {', '.join(missing)}")
    return {a: s for a, s in configured.items() if a not in served}  # a preset's own name is never re-mapped


__all__ = [
    "DEFAULT_MODEL_ALIASES",
    "AliasError",
    "effective_voice_aliases",
    "parse_model_aliases",
    "parse_voice_aliases",
]
