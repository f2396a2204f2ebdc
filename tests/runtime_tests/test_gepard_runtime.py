"""Gepard-1.0's runtime rules: what `admit` takes and refuses (the spec's Gepard table where it reaches
the runtime), the prompt layout with text repetition (vLLM-Omni's build_gepard_prompt_ids), and `say`
refusing the options Gepard has no use for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deploy_plans import assert_inline_only
from gepard_fixtures import *  # noqa: F403  (gepard_tiny, gepard_artifacts)

from ttscore.contract.errors import InvalidRequest

pytestmark = pytest.mark.export


@pytest.fixture(scope="module")
def model(gepard_artifacts: Path) -> Any:
    from ttscore.runtime.families import load_model

    return load_model(gepard_artifacts)


def _req(**kw: Any) -> Any:
    from ttscore.runtime.families.gepard.request import GepardRequest

    return GepardRequest(**{"text": "Hello there.", **kw})


@pytest.mark.parametrize(("kw", "field"), [
    ({"text": "   "}, "input"),
    ({"voice": "alice"}, "voice"),
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"max_new_tokens": 4097}, "max_new_tokens"),
    ({"seed": -1}, "seed"),
])
def test_admit_refuses(model: Any, kw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        model.admit(_req(**kw))
    assert err.value.param == field


def test_admit_takes_the_default_voice_and_the_budget(model: Any) -> None:
    assert model.admit(_req()).max_frames == 1000
    seq = model.admit(_req(voice="default", max_new_tokens=4096, seed=2**63 - 1))
    assert seq.max_frames == min(4096, model.info.backbone.max_positions - seq.prompt_tokens)


def test_prompt_layout_and_text_repetition(model: Any) -> None:
    info = model.info
    slots = [info.speaker_token_base + i for i in range(8)]
    short = model.tokenizer.text_ids("Hi")
    ids = list(model.admit(_req(text="Hi")).ids)
    block = [info.start_of_text, *short, info.end_of_text]
    repeats = min(-(-16 // len(short)), 8)
    assert ids == slots + block * repeats + [info.start_of_speech]
    long_text = "The quick brown fox jumps over the lazy dog, and then some more words."
    text_ids = model.tokenizer.text_ids(long_text)
    assert len(text_ids) >= 13
    want = [*slots, info.start_of_text, *text_ids, info.end_of_text, info.start_of_speech]
    assert list(model.admit(_req(text=long_text)).ids) == want


def test_prompt_embeddings_put_null_prefix_in_the_speaker_slots(model: Any) -> None:
    seq = model.admit(_req())
    emb = model.prompt_embeds(seq.ids)
    np.testing.assert_array_equal(emb[:8], model.null_prefix)
    np.testing.assert_array_equal(emb[8:], np.asarray(model.embed_tokens[seq.ids[8:]]))


@pytest.mark.parametrize("option", ["language", "instructions", "ref_audio", "ref_text"])
def test_say_refuses_what_gepard_does_not_take(gepard_artifacts: Path, option: str) -> None:
    from ttscore.runtime.families.gepard.offline import OFFLINE
    from ttscore.runtime.family import SayOptions

    with pytest.raises(InvalidRequest) as err:
        OFFLINE.say(gepard_artifacts, SayOptions(text="Hello", **{option: "x"}))
    assert err.value.param == option


def test_a_request_without_a_seed_samples_as_seed_42(model: Any) -> None:
    """vLLM-Omni's deploy YAML pins seed 42: without a seed the audio is deterministic."""
    frames = []
    for seed in (None, 42, None):
        seq = model.admit(_req(seed=seed, max_new_tokens=6))
        model.prefill([(seq, seq.prompt_tokens)])
        while seq.finished is None:
            model.step([seq])
        frames.append(np.array(seq.pending))
    np.testing.assert_array_equal(frames[0], frames[1])
    np.testing.assert_array_equal(frames[0], frames[2])


def test_a_prompt_prefilled_in_chunks_makes_the_same_frames(model: Any) -> None:
    """The engine may prefill a long prompt over several calls, batched with other sequences."""
    def run(chunks: list[int]) -> np.ndarray:
        seq = model.admit(_req(text="Good morning, how are you today?", seed=4, max_new_tokens=8))
        other = model.admit(_req(text="Hi", seed=5, max_new_tokens=8))
        assert sum(chunks) == seq.prompt_tokens
        for i, n in enumerate(chunks):
            model.prefill([(seq, n)] + ([(other, other.prompt_tokens)] if i == 0 else []))
        while seq.finished is None:
            model.step([s for s in (seq, other) if s.finished is None])
        return np.array(seq.pending)

    whole = model.admit(_req(text="Good morning, how are you today?")).prompt_tokens
    np.testing.assert_array_equal(run([whole]), run([5, whole - 12, 7]))


def test_served_with_an_inline_vocoder_and_a_tiny_demo(gepard_artifacts: Path) -> None:
    """A demo checkpoint for `serve`/`prepare --demo`; each checkpoint's speech_generation decodes
    inline (its own codec_stream) and has no voice-features model; the manifest lists the one voice."""
    from export.families import FAMILIES
    from ttscore.contract import gepard as spec
    from ttscore.contract.manifest import read_manifest

    assert [name for name, _ in FAMILIES[spec.FAMILY].demo] == ["Gepard-1.0-tiny"]
    assert read_manifest(gepard_artifacts).speakers == {"default": 0}
    assert_inline_only(spec.FAMILY, gepard_artifacts)
