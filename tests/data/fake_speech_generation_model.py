"""Test-only speech_generation model.py: the PRODUCTION model (model_repository/speech_generation)
with its generator replaced by tests/fakes/fake_generator.FakeGenerator, so the real server, real
config, real scheduler and real wire format are exercised without exported weights.

The conftest fixture copies this file over `<rendered repo>/speech_generation/1/model.py`.
Knobs (environment of the server): TTS_FAKE_STEP_DELAY_S (default 0.02), TTS_FAKE_SPF (1920),
TTS_FAKE_SLOW_STEP_S (0: the one long step of a "slow-step" request).
"""

import importlib.util
import os
import sys
from pathlib import Path

import ttscore

REPO_ROOT = Path(ttscore.__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))

from fakes.fake_generator import FakeGenerator  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "_production_speech_generation", REPO_ROOT / "model_repository" / "speech_generation" / "1" / "model.py"
)
_production = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_production)


class TritonPythonModel(_production.TritonPythonModel):
    def _load_generator(self, settings):
        return FakeGenerator(
            max_batch=settings.max_active_requests,
            samples_per_frame=int(os.environ.get("TTS_FAKE_SPF", "1920")),
            step_delay_s=float(os.environ.get("TTS_FAKE_STEP_DELAY_S", "0.02")),
            slow_step_s=float(os.environ.get("TTS_FAKE_SLOW_STEP_S", "0")),
        )
