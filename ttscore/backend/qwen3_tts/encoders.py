"""voice_features' python steps: the reference-audio front end (audio_preprocess)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ttscore.backend.settings import ModelSettingsError
from ttscore.contract import qwen3_tts as spec

log = logging.getLogger(__name__)


# --- voice features: audio_preprocess -----------------------------------------------------------



def preprocess_reference(
    audio: np.ndarray, sample_rate: int, mel_filters: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Reference clip -> (24 kHz audio, log-mel [frames, 128]); see ttscore.runtime.families.qwen3_tts.audio.prepare_reference."""
    from ttscore.runtime.families.qwen3_tts.audio import prepare_reference

    return prepare_reference(audio, sample_rate, mel_filters, param="audio", rate_param="sample_rate")


def mel_filters(model: str, artifacts_dir: Path) -> np.ndarray:
    path = artifacts_dir / f"{spec.MEL_FILTERS}.npy"
    if not path.is_file():
        raise ModelSettingsError(f"{model}: {path} is missing (voice features need a Base checkpoint export)")
    return np.asarray(np.load(path), dtype=np.float32)
