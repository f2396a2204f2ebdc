"""code2wav (Qwen3-TTS): validate each request's (codes, state, position); batching and scattering
are the streaming vocoder models' shared logic (ttscore.backend.vocoder)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ttscore.backend.settings import ModelSettingsError
from ttscore.backend.vocoder import VocoderItem
from ttscore.contract import qwen3_tts as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.manifest import Manifest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CodecFacts:
    state_size: int
    num_groups: int
    samples_per_frame: int
    codebook_size: int | None  # None: codes are not range-checked


def codec_facts(model: str, manifest: Manifest, artifacts_dir: Path) -> CodecFacts:
    state_size = manifest.code2wav_state_size
    if state_size is None:
        raise ModelSettingsError(f"{model}: manifest.json has no code2wav.state_size")
    groups, spf, codebook = spec.NUM_CODE_GROUPS, spec.SAMPLES_PER_FRAME, None
    cfg = manifest.configs
    if cfg:
        from ttscore.runtime.families.qwen3_tts.checkpoint import parse_configs

        info = parse_configs(
            cfg["config.json"], cfg["speech_tokenizer/config.json"], cfg["generation_config.json"], artifacts_dir
        )
        groups, spf, codebook = info.num_code_groups, info.samples_per_frame, info.codebook_size
    return CodecFacts(state_size, groups, spf, codebook)


def code2wav_item(tensors: Mapping[str, np.ndarray], facts: CodecFacts) -> VocoderItem:
    """Validate one request's tensors (with Triton's batch dim). Raises InvalidRequest naming the tensor."""
    codes, state, position = (np.asarray(tensors[n]) if n in tensors else None for n in ("codes", "state", "position"))
    for name, value in (("codes", codes), ("state", state), ("position", position)):
        if value is None:
            raise InvalidRequest(f"input '{name}' is required", name)
    assert codes is not None and state is not None and position is not None
    if codes.ndim != 3 or codes.shape[2] != facts.num_groups:
        raise InvalidRequest(f"input 'codes' must have shape [batch, frames, {facts.num_groups}]", "codes")
    b = codes.shape[0]
    if state.shape != (b, facts.state_size):
        raise InvalidRequest(f"input 'state' must have shape [batch, {facts.state_size}], got {list(state.shape)}", "state")
    if position.size != b:
        raise InvalidRequest("input 'position' must hold one value per batch row", "position")
    position = position.reshape(b).astype(np.int64)
    if codes.size and (codes.min() < 0 or (facts.codebook_size is not None and codes.max() >= facts.codebook_size)):
        raise InvalidRequest(f"input 'codes' must be in [0, {facts.codebook_size})", "codes")
    if np.any(position < 0):
        raise InvalidRequest("input 'position' must be >= 0", "position")
    if not np.all(np.isfinite(state)):
        raise InvalidRequest("input 'state' must be finite", "state")
    return VocoderItem(
        {"codes": codes.astype(np.int64, copy=False), "state": state.astype(np.float32, copy=False), "position": position},
        frames=int(codes.shape[1]),
    )
