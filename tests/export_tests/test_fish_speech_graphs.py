"""Fish Speech's own torch modules (export/fish_speech/graphs.py) in the frame loop (tests/fish_speech_loop.py)
against the vLLM-Omni 0.30.0 reference on the tiny checkpoint, the
reference's sampling noise fed to both: the same prompt ids, the same codes exactly, the Slow AR hidden states
within float error; text-only and cloned (the reference's DAC codes of the clip in the prompt)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fish_speech_fixtures import *  # noqa: F403  (fish_tiny)
from fish_speech_fixtures import reference

pytestmark = pytest.mark.export

HIDDEN_TOLERANCE = 1e-4


def _requests() -> list[dict]:
    return [{"text": "Hello world", "max_new_tokens": 8, "seed": 3},
            {"text": "Good morning.", "max_new_tokens": 6, "seed": 4, "ref_text": "The quick brown fox.",
             "temperature": 0.7, "top_k": 20, "top_p": 0.8},
            {"text": "Greedy, <speaker:1>two.", "max_new_tokens": 4, "seed": 5, "temperature": 0.0}]


def test_frame_loop_matches_reference(fish_tiny: Path) -> None:
    from fish_speech_loop import Knobs, generate, tables, torch_steps

    from export.fish_speech.graphs import FastStep, SlowStep, load
    from ttscore.runtime.families.fish_speech.checkpoint import read_config
    from ttscore.runtime.families.fish_speech.generate import prompt_embeddings
    from ttscore.runtime.families.fish_speech.prompt import FishPrompt

    clip = (0.3 * np.sin(np.arange(30000) * 0.03)).astype(np.float32)
    reqs = _requests()
    ref = reference(fish_tiny, reqs, {"ref_audio_1": clip})
    cfg = read_config(fish_tiny)
    slow_fn, fast_fn = torch_steps(cfg, load(SlowStep(cfg), fish_tiny), load(FastStep(cfg), fish_tiny))
    t = tables(fish_tiny)
    prompt = FishPrompt(fish_tiny / "tokenizer.json")
    compared = 0
    for i, req in enumerate(reqs):
        ref_codes = ref.get(f"ref_codes_{i}")
        if ref_codes is not None:
            ids, at = prompt.clone(req["text"], req["ref_text"], list(ref_codes[:, 0] + cfg.semantic_start))
        else:
            ids, at = prompt.text_only(req["text"]), 0
        np.testing.assert_array_equal(np.array(ids), ref[f"prompt_ids_{i}"])
        knobs = Knobs(float(req.get("temperature", 0.8)), int(req.get("top_k", 30)), float(req.get("top_p", 0.9)))
        got = generate(t, slow_fn, fast_fn, prompt_embeddings(t, ids, ref_codes, at), req["max_new_tokens"], knobs,
                       ref[f"q_slow_{i}"], ref[f"q_fast_{i}"])
        np.testing.assert_array_equal(got.codes, ref[f"codes_{i}"])
        assert got.stopped == bool(ref[f"stopped_{i}"])
        np.testing.assert_allclose(got.hidden, ref[f"hidden_{i}"], atol=HIDDEN_TOLERANCE, rtol=0)
        compared += len(got.codes)
    assert compared >= 10


AUDIO_TOLERANCE = 1e-4


def test_codec_matches_reference(fish_tiny: Path) -> None:
    """DacDecoder on the reference's codes gives the reference's audio within AUDIO_TOLERANCE; DacEncoder gives
    its codes for a clip exactly (the clip zero-padded to whole frames, as DAC.encode pads it)."""
    import torch

    from export.fish_speech.codec import DacDecoder, DacEncoder
    from ttscore.runtime.families.fish_speech.checkpoint import read_codec

    clip = (0.3 * np.sin(np.arange(30000) * 0.03) + 0.05 * np.sin(np.arange(30000) * 0.7)).astype(np.float32)
    reqs = [{"text": "Hello there, friend.", "max_new_tokens": 12, "seed": 7, "ref_text": "A clip."}]
    ref = reference(fish_tiny, reqs, {"ref_audio_0": clip})
    state, dims = read_codec(fish_tiny)
    with torch.inference_mode():
        audio = DacDecoder(state, dims)(torch.from_numpy(ref["codes_0"].T.copy())[None])[0].numpy()
        padded = np.pad(clip, (0, -len(clip) % dims.samples_per_frame))
        codes = DacEncoder(state, dims)(torch.from_numpy(padded)[None])[0].numpy()
    assert len(ref["codes_0"]) >= 5
    np.testing.assert_allclose(audio, ref["audio_0"], atol=AUDIO_TOLERANCE, rtol=0)
    np.testing.assert_array_equal(codes.T, ref["ref_codes_0"])
