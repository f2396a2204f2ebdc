"""The project's Voxtral TTS torch modules (export/voxtral_tts/graphs.py: LMStep with its own K/V cache,
Velocity, CodecDecoder) with the numpy Euler loop (ttscore/runtime/families/voxtral_tts/flow.py) against
the reference (tests/voxtral_tts_reference.py: vLLM-Omni 0.30.0's FlowMatchingAudioTransformer and
VoxtralTTSAudioTokenizer around transformers' MistralModel), noise fed identically, for two preset voices:
semantic codes exactly, acoustic codes exactly (a code may differ by one level only where the value
before rounding sits within 1e-4 of a half level; none does here), hidden states and audio within 1e-4."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from voxtral_tts_fixtures import *  # noqa: F403  (voxtral_tiny)
from voxtral_tts_fixtures import reference

from export.voxtral_tts.graphs import CodecDecoder, LMStep, Velocity, load
from ttscore.runtime.families.voxtral_tts.checkpoint import WEIGHTS, VoxtralInfo, read_checkpoint
from ttscore.runtime.families.voxtral_tts.flow import acoustic_codes

pytestmark = [pytest.mark.export, pytest.mark.parity]

CASES = [{"text": "Hello there, friend.", "voice": "casual_male", "max_new_tokens": 12, "cfg_alpha": 1.2},
         {"text": "Bonjour", "voice": "neutral_female", "max_new_tokens": 10, "cfg_alpha": 1.5}]
TOL = 1e-4


def _table(root: Path, name: str) -> np.ndarray:
    from safetensors import safe_open

    with safe_open(str(root / WEIGHTS), framework="np") as f:
        return f.get_tensor(name).astype(np.float32)


def generate(root: Path, info: VoxtralInfo, prompt: np.ndarray, voice: str, noise: np.ndarray,
             max_new: int, cfg_alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Prefill, then one decode step per frame over the graph's own K/V."""
    step, vel = load(LMStep(info), root), load(Velocity(info), root)
    tok = _table(root, "mm_audio_embeddings.tok_embeddings.weight")
    audio_rows = _table(root, "mm_audio_embeddings.audio_codebook_embeddings.embeddings.weight")
    offsets = np.cumsum([0, *info.codebook_sizes[:-1]])
    embeds = tok[prompt]
    embeds[prompt == info.audio_token_id] = torch.load(root / "voice_embedding" / f"{voice}.pt").float().numpy()
    lm = info.lm
    past = [torch.zeros(1, lm.n_kv_heads, 0, lm.head_dim) for _ in range(2 * lm.n_layers)]
    x = torch.from_numpy(embeds[None])
    pos = 0

    def velocity(xx: np.ndarray, t: np.ndarray, h: np.ndarray, a: np.ndarray) -> np.ndarray:
        return vel(*(torch.from_numpy(v) for v in (xx, t, h, a))).numpy()

    frames, hiddens = [], []
    with torch.inference_mode():
        for i in range(max_new):
            n = x.shape[1]
            out = step(x, torch.ones(1, pos + n, dtype=torch.int64), torch.arange(pos, pos + n)[None], *past)
            hidden, semantic = out[0].numpy(), out[1].numpy()
            past = [torch.cat([p, q], dim=2) for p, q in zip(past, out[2:], strict=True)]
            pos += n
            if semantic[0] == 1:
                break
            ac = acoustic_codes(velocity, noise[i:i + 1], hidden, np.array([cfg_alpha], np.float32), semantic,
                                info.fm.n_decoding_steps, info.acoustic_codebook_size)
            codes = np.concatenate([semantic, ac[0]])  # the semantic argmax id already counts the specials
            frames.append(codes)
            hiddens.append(hidden[0])
            x = torch.from_numpy(audio_rows[codes + offsets].sum(0)[None, None])
        codes_np = np.array(frames, np.int64).reshape(len(frames), -1)
        audio = load(CodecDecoder(info), root)(torch.from_numpy(codes_np.T[None] - 2)).numpy()[0]
    return codes_np, np.array(hiddens, np.float32).reshape(len(frames), -1), audio


def test_modules_match_reference(voxtral_tiny: Path) -> None:
    info = read_checkpoint(voxtral_tiny)
    noise = {f"noise_{i}": np.random.default_rng(10 + i).standard_normal(
        (c["max_new_tokens"], info.n_acoustic_codebook)).astype(np.float32) for i, c in enumerate(CASES)}
    ref = reference(voxtral_tiny, CASES, noise)
    for i, case in enumerate(CASES):
        codes, hidden, audio = generate(voxtral_tiny, info, ref[f"prompt_ids_{i}"], case["voice"], noise[f"noise_{i}"],
                                        case["max_new_tokens"], case["cfg_alpha"])
        want = ref[f"codes_{i}"]
        assert len(want) >= 3, "the case must produce frames"
        np.testing.assert_array_equal(codes[:, 0], want[:, 0])  # semantic codes exactly
        np.testing.assert_array_equal(codes, want)  # acoustic codes too (see the module docstring)
        np.testing.assert_allclose(hidden, ref[f"hidden_{i}"], atol=TOL, rtol=0)
        assert audio.shape == ref[f"audio_{i}"].shape
        np.testing.assert_allclose(audio, ref[f"audio_{i}"], atol=TOL, rtol=0)
