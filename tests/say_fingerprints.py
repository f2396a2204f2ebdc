"""The SHA-256 of a seeded `triton-tts say` WAV for every family, on its tiny checkpoint exported by the tests'
artifact store: a refactor that must not change any family's output (issue 37) prints the same table before and
after.

`python tests/say_fingerprints.py [OUT.json]` (from the repository root; takes a few minutes when the store is
cold). Each row: family, the request, the WAV's SHA-256 and its length in samples."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(ROOT))


def _checkpoints() -> dict[str, Path]:
    from artifacts import STORE

    from export.breeze_tts_2.tiny import make_tiny_breeze
    from export.cosyvoice3.tiny import make_tiny_cosyvoice3
    from export.fish_speech.tiny import make_tiny_fish
    from export.gepard.tiny import make_tiny_gepard
    from export.moss_tts_nano.tiny import make_tiny_moss
    from export.omnivoice.tiny import make_tiny_omnivoice
    from export.qwen3_tts.tiny import make_tiny
    from export.voxcpm2.tiny import make_tiny_voxcpm2
    from export.voxtral_tts.tiny import make_tiny_voxtral

    return {  # the names and makers the test fixtures use, so the store's copies are shared
        "qwen3_tts": STORE.checkpoint("ckpt-custom_voice", lambda o: make_tiny("custom_voice", o, seed=0, greedy=False)),
        "voxcpm2": STORE.checkpoint("VoxCPM2-tiny", lambda o: make_tiny_voxcpm2(o, seed=0)),
        "breeze_tts_2": STORE.checkpoint("Breeze-TTS-2-tiny", lambda o: make_tiny_breeze(o, seed=0)),
        "omnivoice": STORE.checkpoint("OmniVoice-tiny", lambda o: make_tiny_omnivoice(o, seed=0)),
        "gepard": STORE.checkpoint("gepard-tiny", lambda o: make_tiny_gepard(o, seed=0)),
        "voxtral_tts": STORE.checkpoint("voxtral-tiny", lambda o: make_tiny_voxtral(o, seed=0)),
        "fish_speech": STORE.checkpoint("fish-tiny", lambda o: make_tiny_fish(o, seed=0)),
        "cosyvoice3": STORE.checkpoint("cosyvoice3-tiny", lambda o: make_tiny_cosyvoice3(o, seed=0)),
        "moss_tts_nano": STORE.checkpoint("moss-tts-nano-tiny", lambda o: make_tiny_moss(o, seed=0)),
    }


TEXT = "Hello, this is a fingerprint."
ARGS: dict[str, list[str]] = {
    "qwen3_tts": ["--voice", "vivian", "--language", "English", "--max-new-tokens", "24"],
    "voxcpm2": ["--max-new-tokens", "8"],
    "breeze_tts_2": ["--max-new-tokens", "16"],
    "omnivoice": [],
    "gepard": ["--max-new-tokens", "24"],
    "voxtral_tts": ["--voice", "casual_male", "--max-new-tokens", "12"],
    "fish_speech": ["--max-new-tokens", "12"],
    "cosyvoice3": ["--max-new-tokens", "30", "--ref-text", "A short reference."],
    "moss_tts_nano": ["--max-new-tokens", "12"],
}
REF_AUDIO = ("cosyvoice3", "moss_tts_nano")  # families that need a reference clip


def main() -> None:
    from artifacts import STORE

    out: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ref = Path(tmp) / "ref.wav"
        t = np.arange(int(1.2 * 24000)) / 24000
        sf.write(ref, (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), 24000)
        for family, ckpt in _checkpoints().items():
            art = STORE.export(ckpt)
            wav = Path(tmp) / f"{family}.wav"
            extra = ["--ref-audio", str(ref)] if family in REF_AUDIO else []
            cmd = [str(Path(sys.executable).parent / "triton-tts"), "say", "--artifacts", str(art), "--seed", "7",
                   *ARGS[family], *extra, "-o", str(wav), TEXT]
            subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True)
            data = wav.read_bytes()
            out[family] = {"sha256": hashlib.sha256(data).hexdigest(), "samples": sf.info(str(wav)).frames,
                           "args": ARGS[family] + extra[:1]}
            print(f"{family:14s} {out[family]['sha256'][:16]}  {out[family]['samples']:7d} samples", flush=True)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
