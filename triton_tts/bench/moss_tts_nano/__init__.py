"""MOSS-TTS-Nano's part of the benches that compare with the reference (`bench offline`, `bench compare`;
triton_tts.bench.common.bench_families): its random-weight checkpoint (`make-tiny --family moss_tts_nano`) and the
reference, mlx-audio 0.6.2's own `Model.generate` (mlx 0.32.4 on the CPU), run in the reference environment
(`.venv-mlx`, built by `make setup`; `TTS_MOSS_REFERENCE_PYTHON` names another interpreter) by
perf/moss_tts_nano_reference.py in `--serve` mode: one process that loads the checkpoint once and generates per
request, so the time measured here is its generate alone (plus a line over a pipe).

Every request clones the same voice: 25 frames (2 s) of seeded reference codes (below 16: the tiny codebook), sent as `ref_audio_tokens` (what
the gateway's moss_codec_encoder gives speech_generation), so the prompt is the same length everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from triton_tts.bench import common
from ttscore.contract import moss_tts_nano as spec

FAMILY = spec.FAMILY
SIZES = ("tiny", "real")
CHECKPOINT = "voice_clone"
REF_FRAMES = 25
TINY_CODEBOOK = 16  # codes below every checkpoint's codebook size (the tiny one has 16), so one request fits both
REF_CODES = np.random.default_rng(0).integers(0, TINY_CODEBOOK, (REF_FRAMES, spec.N_VQ)).tolist()
REQUEST: dict[str, Any] = {"ref_audio_tokens": REF_CODES}
SCRIPT = common.ROOT / "perf" / "moss_tts_nano_reference.py"


def make_checkpoint(path: Path, size: str) -> Path:
    from export.moss_tts_nano.tiny import make_tiny_moss

    return make_tiny_moss(path, seed=0, size=size)


class Reference(common.ServedReference):
    """mlx-audio's generate in its own environment: greedy, voice clone from REF_CODES, capped at `frames`."""

    def __init__(self, checkpoint: Path) -> None:
        super().__init__(common.reference_python("TTS_MOSS_REFERENCE_PYTHON", ".venv-mlx"), SCRIPT, checkpoint)
