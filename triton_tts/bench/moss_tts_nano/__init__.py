"""MOSS-TTS-Nano's part of the benches that compare with the reference (`bench offline`, `bench compare`;
triton_tts.bench.common.bench_families): its random-weight checkpoint (`make-tiny --family moss_tts_nano`) and the
reference, mlx-audio 0.6.2's own `Model.generate` (mlx 0.32.4 on the CPU), run in the reference environment
(`.venv-mlx`, built by `make setup`; `TTS_MOSS_REFERENCE_PYTHON` names another interpreter) by
perf/moss_tts_nano_reference.py in `--serve` mode: one process that loads the checkpoint once and generates per
request, so the time measured here is its generate alone (plus a line over a pipe).

Every request clones the same voice: 25 frames (2 s) of seeded reference codes (below 16: the tiny codebook), sent as `ref_audio_tokens` (what
the gateway's moss_codec_encoder gives speech_generation), so the prompt is the same length everywhere."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from ttscore.contract import moss_tts_nano as spec

FAMILY = spec.FAMILY
SIZES = ("tiny", "real")
CHECKPOINT = "voice_clone"
REF_FRAMES = 25
TINY_CODEBOOK = 16  # codes below every checkpoint's codebook size (the tiny one has 16), so one request fits both
REF_CODES = np.random.default_rng(0).integers(0, TINY_CODEBOOK, (REF_FRAMES, spec.N_VQ)).tolist()
REQUEST: dict[str, Any] = {"ref_audio_tokens": REF_CODES}
ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "perf" / "moss_tts_nano_reference.py"


def make_checkpoint(path: Path, size: str) -> Path:
    from export.moss_tts_nano.tiny import make_tiny_moss

    return make_tiny_moss(path, seed=0, size=size)


def reference_python() -> Path:
    given = os.environ.get("TTS_MOSS_REFERENCE_PYTHON")
    exe = Path(given) if given else ROOT / ".venv-mlx" / "bin" / "python"
    if not exe.is_file():
        raise SystemExit(f"no mlx-audio reference environment at {exe}: run `make setup` (or --no-reference)")
    return exe


class Reference:
    """mlx-audio's generate in its own environment: greedy, voice clone from REF_CODES, capped at `frames`."""

    def __init__(self, checkpoint: Path) -> None:
        self.proc = subprocess.Popen([str(reference_python()), str(SCRIPT), str(checkpoint), "--serve"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self._read()  # loaded

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the mlx-audio reference exited ({self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def generate(self, text: str, frames: int, **_fields: Any) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"text": text, "frames": frames}) + "\n")
        self.proc.stdin.flush()
        return int(self._read()["frames"])

    def __del__(self) -> None:
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
