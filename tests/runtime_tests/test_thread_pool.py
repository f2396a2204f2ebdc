"""ttscore.runtime.onnx.share_thread_pool: every session of a process on one ONNX Runtime pool
(`thread_pool: shared`, `say/bench --thread-pool shared`). Process-wide, so each case runs in its own
interpreter (and no test may ask for it in the pytest process): the audio is the same as with a pool per session of the same size, and once shared no
session of the process asks for its own pool (ONNX Runtime would refuse it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

SCRIPT = """
import sys
import numpy as np
from ttscore.runtime.onnx import session_options, share_thread_pool
if sys.argv[2] == "shared":
    share_thread_pool(2)
    share_thread_pool(1)  # one-way: a second call changes nothing
from ttscore.runtime.engine import Generator
from ttscore.runtime.families import load_model
from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest
model = load_model(sys.argv[1], threads=2, encoders=False)
req = Qwen3TTSRequest(text="One pool for every graph.", speaker="vivian", max_new_tokens=8, seed=3)
pcm = np.concatenate([e.pcm for e in Generator(model, max_batch=1, chunk_policy="fixed").synthesize(req)])
np.save(sys.argv[3], pcm)
print("per-session", session_options().use_per_session_threads)
"""


def _run(art: Path, pool: str, out: Path) -> str:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(art), pool, str(out)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_a_shared_pool_makes_the_same_audio(tiny_custom_voice, tmp_path):
    _, art, _ = tiny_custom_voice
    shared = _run(art, "shared", tmp_path / "shared.npy")
    session = _run(art, "session", tmp_path / "session.npy")
    assert "per-session False" in shared and "per-session True" in session
    a, b = np.load(tmp_path / "shared.npy"), np.load(tmp_path / "session.npy")
    assert a.size > 0 and np.array_equal(a, b)
