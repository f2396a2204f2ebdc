"""MOSS-TTS-Nano checkpoints the tests share: the tiny one make-tiny writes, and a whole MOSS-TTS-Nano the project did
not create (`moss_foreign`): the language model from mlx-audio 0.6.2's own config classes and initialisation
(tests/moss_tts_nano_lm_mlx.py `foreign`, other dimensions than make-tiny's, a seed whose greedy decoding runs past
frame 0), the codec from mlx-audio's own codec classes (tests/moss_tts_nano_codec_foreign.py, in
`<checkpoint>/audio_tokenizer/`), both loaded back strictly by mlx-audio, and a SentencePiece tokenizer.model of the
LM's vocabulary (make-tiny's writer). Their exports: the store's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from artifacts import TESTS, checkpoint_fixture, export_fixture, tiny_fixture

LM_SCRIPT = TESTS / "moss_tts_nano_lm_mlx.py"
CODEC_SCRIPT = TESTS / "moss_tts_nano_codec_foreign.py"
# The foreign LM's dimensions (its codebook is the foreign codec's 32).
FOREIGN = {"seed": 9, "vocab_size": 520, "n_embd": 48, "n_layer": 3, "n_head": 6, "n_inner": 96, "local_layers": 2,
           "codebook_size": 32, "rope_base": 5000.0}


def _require_mlx() -> None:
    import refenv

    try:
        refenv.python("mlx")
    except refenv.RefEnvError as exc:
        refenv.missing(str(exc))


def probe_rows(vocab: int, codebook: int, seed: int = 3) -> np.ndarray:
    """A voice-clone-shaped prompt of plain ids (text rows, 4 reference code rows, text rows ending in audio_start):
    the foreign maker keeps a seed whose greedy decoding of it makes two frames."""
    from ttscore.contract.moss_tts_nano import graphs as spec

    rng = np.random.default_rng(seed)
    text = [spec.IM_START_ID, *rng.integers(10, vocab, 6), spec.AUDIO_START_ID]
    tail = [spec.AUDIO_END_ID, *rng.integers(10, vocab, 14), spec.IM_END_ID, spec.IM_START_ID, spec.AUDIO_START_ID]
    rows = [[i] + [codebook] * 16 for i in text]
    rows += [[spec.AUDIO_USER_SLOT_ID, *rng.integers(0, codebook, 16)] for _ in range(4)]
    rows += [[i] + [codebook] * 16 for i in tail]
    return np.array(rows, np.int64)


def make_foreign(out: Path) -> None:
    import refenv

    from export.moss_tts_nano.tiny import tokenizer_model

    out.mkdir(parents=True, exist_ok=True)
    refenv.run("mlx", LM_SCRIPT, {"rows": probe_rows(300, FOREIGN["codebook_size"])},
               ["foreign", str(out), json.dumps(FOREIGN)])
    refenv.run("mlx", CODEC_SCRIPT, {}, [str(out)])
    (out / "tokenizer.model").write_bytes(tokenizer_model(vocab=FOREIGN["vocab_size"]))


moss_tiny = tiny_fixture("moss_tiny", "ckpt-moss_tts_nano", "export.moss_tts_nano.tiny:make_tiny_moss")
moss_artifacts = export_fixture("moss_artifacts", "moss_tiny")
moss_foreign = checkpoint_fixture("moss_foreign", "moss-tts-nano-foreign-whole", make_foreign,
                                  sources=[LM_SCRIPT, CODEC_SCRIPT], require=_require_mlx)
moss_foreign_artifacts = export_fixture("moss_foreign_artifacts", "moss_foreign")


@pytest.fixture(scope="session")
def moss_mlx() -> Path:
    _require_mlx()
    return LM_SCRIPT
