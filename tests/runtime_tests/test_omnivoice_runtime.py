"""OmniVoice's runtime: the unmasking schedule against the reference's, the request rules (400s
naming the field), and `say` on the tiny checkpoint."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from omnivoice_fixtures import *  # noqa: F403  (its session fixtures: omnivoice_tiny, omnivoice_artifacts)

from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.families.omnivoice.request import OmniVoiceRequest
from ttscore.runtime.families.omnivoice.unmask import schedule, time_steps


@pytest.mark.parity
@pytest.mark.parametrize("num_step, t_shift", [(32, 0.1), (8, 0.1), (16, 1.0), (1, 0.1), (7, 0.37), (64, 0.05)])
def test_time_steps_and_schedule_are_the_reference_s(num_step: int, t_shift: float) -> None:
    from export.omnivoice.reference import omnivoice_module

    ref = omnivoice_module()._get_time_steps(t_start=0.0, t_end=1.0, num_step=num_step, t_shift=t_shift)
    np.testing.assert_array_equal(time_steps(num_step, t_shift), ref.numpy())
    ts = ref.tolist()
    for total in (8, 200, 8 * 377):
        left, want = total, []
        for s in range(num_step):
            k = left if s == num_step - 1 else min(math.ceil(total * (ts[s + 1] - ts[s])), left)
            want.append(k)
            left -= k
        assert schedule(total, num_step, t_shift) == want


@pytest.fixture(scope="module")
def model(omnivoice_artifacts: Path) -> Any:
    from ttscore.runtime.families import load_model

    return load_model(omnivoice_artifacts)


@pytest.mark.parametrize("request_kw, field", [
    ({"text": " "}, "text"),
    ({"text": "hi", "instructions": "robot"}, "instructions"),
    ({"text": "hi", "language": "Klingon"}, "language"),
    ({"text": "hi", "num_step": 0}, "num_step"),
    ({"text": "hi", "guidance_scale": float("nan")}, "guidance_scale"),
    ({"text": "hi", "position_temperature": -1.0}, "position_temperature"),
    ({"text": "a long text " * 10, "max_new_tokens": 5}, "max_new_tokens"),
    ({"text": "hi", "ref_codes": np.zeros((3, 4), np.int64)}, "ref_codes"),
])
def test_refusals_name_the_field(model: Any, request_kw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        model.admit(OmniVoiceRequest(**request_kw))
    assert info.value.param == field


def test_language_auto_is_none_and_names_map_to_ids(model: Any) -> None:
    a = model.admit(OmniVoiceRequest(text="hi", language="Auto"))
    b = model.admit(OmniVoiceRequest(text="hi"))
    np.testing.assert_array_equal(a.cond_ids, b.cond_ids)
    en = model.admit(OmniVoiceRequest(text="hi", language="en"))
    np.testing.assert_array_equal(model.admit(OmniVoiceRequest(text="hi", language="English")).cond_ids, en.cond_ids)
    assert en.cond_ids.shape != a.cond_ids.shape or not np.array_equal(en.cond_ids, a.cond_ids)


def test_seeded_sampling_repeats_and_the_whole_utterance_is_one_chunk(model: Any) -> None:
    from ttscore.runtime.engine import Generator

    def run(seed: int) -> Any:
        events = list(Generator(model).synthesize(OmniVoiceRequest(text="hello world", seed=seed, num_step=4,
                                                                   class_temperature=1.0)))
        assert len(events) == 1 and events[0].final and events[0].usage.output_tokens == events[0].frames
        return events[0]

    a, b, c = run(1), run(1), run(2)
    np.testing.assert_array_equal(a.codes, b.codes)
    np.testing.assert_array_equal(a.pcm, b.pcm)
    assert not np.array_equal(a.codes, c.codes)
    assert a.pcm.shape == (a.frames * 960,) and np.isfinite(a.pcm).all()


def test_say_writes_a_wav(omnivoice_tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`say --checkpoint`: exported into the (test's own) cache, then synthesized."""
    import soundfile as sf

    from ttscore.tools.cli import main

    monkeypatch.setenv("TRITON_TTS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out.wav"
    assert main(["say", "--checkpoint", str(omnivoice_tiny), "-o", str(out), "--instructions", "female",
                 "--seed", "1", "Hello there."]) in (0, None)
    audio, sr = sf.read(out)
    assert sr == 24000 and len(audio) > 0 and len(audio) % 960 == 0


def test_served_with_an_inline_codec_decoder_and_a_tiny_demo(omnivoice_artifacts: Path) -> None:
    """A demo checkpoint for `serve`/`prepare --demo`; a deployment renders no Triton model but each
    checkpoint's speech_generation (codec decoder inline) and no voice-features model."""
    from dataclasses import dataclass

    from export.families import FAMILIES
    from ttscore.contract.manifest import Manifest, read_manifest

    entry = FAMILIES["omnivoice"]
    assert [name for name, _ in entry.demo] == ["OmniVoice-tiny"]

    @dataclass
    class Served:
        name: str
        artifacts: Path
        manifest: Manifest

    plan = entry.deploy([Served("omni", omnivoice_artifacts, read_manifest(omnivoice_artifacts))])
    assert plan.vocoder == {"omni": "inline"} and plan.voice_features == {"omni": None}


def test_sentence_chunks_send_each_chunk_as_it_completes(model: Any) -> None:
    """A streamed request: one audio event per chunk, each made at that chunk's last step; the same
    text as a whole request is one generation (the reference's rule under 30 s)."""
    from ttscore.runtime.engine import Generator

    text = "The first sentence is short. A second one follows it. The third ends the request."
    knobs = {"num_step": 4, "position_temperature": 0.0, "class_temperature": 0.0}
    gen = Generator(model)
    gen.submit("s", OmniVoiceRequest(text=text, sentence_chunks=True, **knobs))
    steps, audible = 0, []
    while gen.num_active:
        audible += [steps for ev in gen.step() if ev.frames]
        steps += 1
    assert audible == [3, 7, 11]  # three sentences, four steps each
    whole = list(Generator(model).synthesize(OmniVoiceRequest(text=text, **knobs)))
    assert [ev.final for ev in whole if ev.frames] == [True]
