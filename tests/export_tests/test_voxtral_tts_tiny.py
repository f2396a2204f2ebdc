"""Voxtral TTS's make-tiny checkpoint (Mistral's layout) and its strict reader, checked against
vLLM-Omni 0.30.0's own modules (tests/voxtral_tts_reference.py) and, where installed, mistral-common."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from checkpoint_layouts import copy_of, edit_safetensors
from voxtral_tts_fixtures import *  # noqa: F403  (voxtral_tiny)
from voxtral_tts_fixtures import reference

from export.families import family_of
from ttscore.contract.errors import CheckpointError
from ttscore.runtime.families.voxtral_tts.checkpoint import (
    PARAMS,
    WEIGHTS,
    parse_params,
    read_checkpoint,
    tensor_shapes,
)

pytestmark = pytest.mark.export


def test_layout_and_facts(voxtral_tiny: Path) -> None:
    names = sorted(p.relative_to(voxtral_tiny).as_posix() for p in voxtral_tiny.rglob("*") if p.is_file())
    assert names == ["consolidated.safetensors", "params.json", "tekken.json",
                     "voice_embedding/casual_male.pt", "voice_embedding/neutral_female.pt"]
    info = read_checkpoint(voxtral_tiny)
    assert family_of(voxtral_tiny).name == "voxtral_tts"
    assert info.voices == {"neutral_female": 0, "casual_male": 1}
    assert (info.audio_token_id, info.begin_audio_token_id) == (24, 25)
    # params.json has no n_decoding_steps (as the public checkpoint): vLLM-Omni's default 7.
    assert "n_decoding_steps" not in json.loads((voxtral_tiny / PARAMS).read_text())["multimodal"][
        "audio_model_args"]["acoustic_transformer_args"]
    assert (info.fm.n_decoding_steps, info.fm.steps_given) == (7, False)
    assert info.codec.samples_per_frame == 1920 and info.codec.sampling_rate == 24000
    import torch

    voice = torch.load(voxtral_tiny / "voice_embedding" / "neutral_female.pt")
    assert tuple(voice.shape) == (5, info.lm.dim)


def test_decoding_steps_read_from_params(voxtral_tiny: Path) -> None:
    params = json.loads((voxtral_tiny / PARAMS).read_text())
    params["multimodal"]["audio_model_args"]["acoustic_transformer_args"]["n_decoding_steps"] = 8
    assert parse_params(params).fm.n_decoding_steps == 8


@pytest.mark.parametrize("key", ["rope_scaling", "yarn", "llama_4_scaling"])
def test_unsupported_rope_refused(voxtral_tiny: Path, key: str) -> None:
    params = json.loads((voxtral_tiny / PARAMS).read_text())
    params[key] = {"factor": 4.0}
    with pytest.raises(CheckpointError, match=key):
        parse_params(params)


def test_strict_loader_names_missing_unexpected_misshapen(voxtral_tiny: Path, tmp_path: Path) -> None:
    root = copy_of(voxtral_tiny, tmp_path / "missing")
    edit_safetensors(root / WEIGHTS, lambda s: s.pop("acoustic_transformer.layers.1.attention.wk.weight"))
    with pytest.raises(CheckpointError, match=r"missing 1 tensor\(s\): acoustic_transformer\.layers\.1\.attention\.wk"):
        read_checkpoint(root)
    root = copy_of(voxtral_tiny, tmp_path / "unexpected")
    edit_safetensors(root / WEIGHTS, lambda s: s.update({"layers.0.attention.bogus.weight": s["norm.weight"].clone()}))
    with pytest.raises(CheckpointError, match=r"unexpected 1 tensor\(s\): layers\.0\.attention\.bogus\.weight"):
        read_checkpoint(root)
    root = copy_of(voxtral_tiny, tmp_path / "shape")
    edit_safetensors(root / WEIGHTS, lambda s: s.update({"norm.weight": s["norm.weight"][:-1].clone()}))
    with pytest.raises(CheckpointError, match=r"norm\.weight \[63\] \(want \[64\]\)"):
        read_checkpoint(root)
    # The codec encoder (absent from the public checkpoint) is tolerated when present.
    root = copy_of(voxtral_tiny, tmp_path / "encoder")
    edit_safetensors(root / WEIGHTS, lambda s: s.update({"audio_tokenizer.input_proj.conv.parametrizations.weight.original0":
                                       s["norm.weight"].clone()}))
    read_checkpoint(root)
    root = copy_of(voxtral_tiny, tmp_path / "voice")
    (root / "voice_embedding" / "casual_male.pt").unlink()
    with pytest.raises(CheckpointError, match=r"missing voice_embedding/casual_male\.pt"):
        read_checkpoint(root)


def test_tensor_names_are_vllm_omnis(voxtral_tiny: Path) -> None:
    """Every tensor vLLM-Omni's FlowMatchingAudioTransformer and VoxtralTTSAudioTokenizer hold (encoder
    aside) is one tensor_shapes expects, with its shape, and the other way round for those prefixes."""
    out = reference(voxtral_tiny, [])
    theirs = dict(e.split(" ", 1) for e in out["state"].tolist())
    mine = {n: str(list(s)) for n, s in tensor_shapes(read_checkpoint(voxtral_tiny)).items()
            if n.startswith(("acoustic_transformer.", "audio_tokenizer.", "mm_audio_embeddings.audio_codebook"))}
    assert theirs == mine


def test_reference_generates_with_fed_noise(voxtral_tiny: Path) -> None:
    """The reference runs on the tiny checkpoint for both voices; x0 comes from the given noise (other
    noise, other acoustic codes; the first semantic code depends on the prompt only)."""
    n_ac = read_checkpoint(voxtral_tiny).n_acoustic_codebook
    reqs = [{"text": "Hello there", "voice": "casual_male", "max_new_tokens": 4},
            {"text": "Hello there", "voice": "casual_male", "max_new_tokens": 4},
            {"text": "Hello there", "voice": "neutral_female", "max_new_tokens": 4}]
    noise = {f"noise_{i}": np.random.default_rng(i % 2).standard_normal((4, n_ac)).astype(np.float32)
             for i in range(3)}
    noise["noise_1"] = -noise["noise_0"]
    out = reference(voxtral_tiny, reqs, noise)
    c0, c1, c2 = out["codes_0"], out["codes_1"], out["codes_2"]
    assert c0.shape[1] == 1 + n_ac and len(c0) >= 1
    assert c0[0, 0] == c1[0, 0] and not np.array_equal(c0[0, 1:], c1[0, 1:])
    assert ((c0 >= 2) & (c0 < 2 + 64)).all()
    assert not np.array_equal(out["prompt_ids_0"], out["prompt_ids_2"])  # 3 vs 5 voice frames
    assert c2.shape[1] == 1 + n_ac and not np.array_equal(c0, c2)
    assert out["audio_0"].shape == (1920 * len(c0),) and np.isfinite(out["audio_0"]).all()


def test_tekken_loads_in_mistral_common(voxtral_tiny: Path) -> None:
    """mistral-common 1.13.1 (not in the project's environments: `pip install mistral-common==1.13.1`
    into one to run this) loads the tiny tekken.json and lays out the speech prompt as the reference's
    hand-written fallback does."""
    import importlib.util

    import refenv

    if importlib.util.find_spec("mistral_common") is None:
        refenv.missing("mistral-common (requirements-nodeps.txt) is not installed in this environment")
    from mistral_common.protocol.speech.request import SpeechRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    tok = MistralTokenizer.from_file(str(voxtral_tiny / "tekken.json"))
    ids = tok.encode_speech_request(SpeechRequest(input="Hi", voice="casual_male")).tokens
    assert ids == [1, 25, 24, 24, 24, 35, ord("H") + 40, ord("i") + 40, 36, 25]


def test_real_size_params() -> None:
    """--size real's params.json (not written here: 8 GB) has the published size: ~4.0 B parameters, 20
    preset voices, 1920 samples a frame."""
    import math

    from export.voxtral_tts.tiny import params

    info = parse_params(params("real"))
    total = sum(math.prod(s) for s in tensor_shapes(info).values())
    assert 3.9e9 < total < 4.1e9
    assert len(info.voices) == 20 and info.codec.samples_per_frame == 1920 and info.n_acoustic_codebook == 36
