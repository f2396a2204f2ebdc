"""Breeze-TTS-2 offline parity: the exported graphs under our runtime produce exactly the reference
composition's codes (transformers 5.14.1 in ref5: T5Gemma2TextEncoder, Qwen3Model, LlamaModel depth
decoder, greedy with the 1.1 code-0 repetition penalty, the prompt ids of vLLM-Omni 0.30.0's own
`build_breeze_prompt` from its wheel), in the four modes and with the defaults (S0, the default instruction); the streamed audio equals the Qwen3-TTS reference decoder (qwen-tts, main env) on those codes
within AUDIO_ATOL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from breeze_tts_2_fixtures import reference, run_codes

pytestmark = [pytest.mark.parity, pytest.mark.slow]

AUDIO_ATOL = 1e-4  # streamed exported code2wav vs the reference decoder (measured ~1e-6 on the tiny codec)
FRAMES = 10

CASES = {
    "default": {"text": "Good morning, how are you today?"},  # no voice, no instructions: S0, the default instruction
    "plain": {"text": "Hello world, good morning.", "voice": "S3"},
    "design": {"text": "Good morning, how are you today?", "instructions": "A calm warm voice, slowly."},
    "clone": {"text": "Testing one two three.", "ref_text": "The quick brown fox."},
    "direction": {"text": "Numbers one two three.", "ref_text": "The quick brown fox.",
                  "instructions": "Speak clearly and naturally."},
    # Odd whitespace and Chinese: vLLM-Omni's adapter passes the text, the instructions and the transcript as given.
    "whitespace": {"text": " 你好，  world.\n", "ref_text": "  The quick brown fox. ", "instructions": " A calm voice.  "},
}


@pytest.fixture(scope="module")
def model(breeze_export: Path) -> Any:
    from ttscore.runtime.families import load_model

    return load_model(breeze_export)


@pytest.fixture(scope="module")
def ref_codes(model: Any) -> np.ndarray:
    from export.tracing import validation_audio

    return model.encode_reference(validation_audio(0.9, 3), 24000)


def _request(case: dict[str, Any], codes: np.ndarray | None) -> Any:
    from ttscore.runtime.families.breeze_tts_2.request import BreezeRequest

    return BreezeRequest(text=case["text"], voice=case.get("voice"), instructions=case.get("instructions"),
                         ref_text=case.get("ref_text"), ref_codes=codes if "ref_text" in case else None,
                         max_new_tokens=FRAMES)


@pytest.fixture(scope="module")
def reference_codes(breeze_tiny: Path, ref_codes: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
    got = reference(breeze_tiny, "generate", {"ref_codes": ref_codes},
                    json.dumps([{**case, "max_new_tokens": FRAMES} for case in CASES.values()]))
    return {mode: {k: got[f"{k}_{i}"] for k in ("codes", "prompt_ids", "text_mask")}
            for i, mode in enumerate(CASES)}


@pytest.mark.parametrize("mode", list(CASES))
def test_codes_equal_the_reference(mode: str, model: Any, ref_codes: np.ndarray,
                                   reference_codes: dict[str, dict[str, np.ndarray]]) -> None:
    want = reference_codes[mode]
    seq = model.admit(_request(CASES[mode], ref_codes))
    np.testing.assert_array_equal(seq.ids, want["prompt_ids"])
    np.testing.assert_array_equal(seq.text_mask, want["text_mask"])
    (got,) = run_codes(model, [_request(CASES[mode], ref_codes)])
    assert got.shape == want["codes"].shape and got.shape[0] > 0
    np.testing.assert_array_equal(got, want["codes"])
    assert len({tuple(f) for f in got}) > 1  # not one frame repeated


def test_batched_requests_equal_each_alone(model: Any, ref_codes: np.ndarray,
                                           reference_codes: dict[str, dict[str, np.ndarray]]) -> None:
    """Four modes in one batch (ragged prompts and pasts) make each request's own codes."""
    got = run_codes(model, [_request(CASES[m], ref_codes) for m in CASES])
    for g, mode in zip(got, CASES, strict=True):
        np.testing.assert_array_equal(g, reference_codes[mode]["codes"], err_msg=mode)


def test_streamed_audio_equals_the_reference_decoder(breeze_tiny: Path, model: Any,
                                                     reference_codes: dict[str, dict[str, np.ndarray]]) -> None:
    import torch

    from export.qwen3_tts.code2wav import get_decoder, reference_decode
    from export.qwen3_tts.reference import reference_imports
    from ttscore.runtime.engine import Generator

    req = _request(CASES["plain"], None)
    req.initial_chunk_frames, req.chunk_frames = 1, 3
    pcm = np.concatenate([ev.pcm for ev in Generator(model, max_batch=1, chunk_policy="fixed").synthesize(req)])
    with reference_imports():
        from qwen_tts import Qwen3TTSTokenizer
    tok = Qwen3TTSTokenizer.from_pretrained(str(breeze_tiny / "audio_tokenizer"), dtype=torch.float32,
                                            device_map="cpu")
    want = reference_decode(get_decoder(tok.model), reference_codes["plain"]["codes"][None])[0]
    assert pcm.shape == want.shape == (FRAMES * 1920,)
    assert np.abs(want).max() > 1e-3
    np.testing.assert_allclose(pcm, want, atol=AUDIO_ATOL)
