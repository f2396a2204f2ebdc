"""Breeze-TTS-2 runtime rules: what `admit` refuses (naming the field), the end of an utterance
(the EOS row, the frame budget, the context cap), and `say`'s refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deploy_plans import deploy

from ttscore.contract import breeze_tts_2 as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.families.breeze_tts_2.request import BreezeRequest

pytestmark = pytest.mark.export


@pytest.fixture(scope="module")
def model(breeze_export: Path) -> Any:
    from ttscore.runtime.families import load_model

    return load_model(breeze_export)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"text": " "}, "input"),
    ({"text": "x" * (spec.MAX_TEXT_CHARS + 1)}, "input"),
    ({"text": "hi", "voice": "S10"}, "voice"),
    ({"text": "hi", "voice": "vivian"}, "voice"),
    ({"text": "hi", "ref_text": "only text"}, "ref_text"),
    ({"text": "hi", "ref_codes": np.zeros((3, 16), np.int64)}, "ref_text"),
    ({"text": "hi", "ref_codes": np.zeros((3, 8), np.int64), "ref_text": "t"}, "ref_audio"),
    ({"text": "hi", "ref_codes": np.full((3, 16), 2050, np.int64), "ref_text": "t"}, "ref_audio"),
    ({"text": "hi", "max_new_tokens": 0}, "max_new_tokens"),
    ({"text": "hi", "max_new_tokens": spec.MAX_NEW_TOKENS_LIMIT + 1}, "max_new_tokens"),
    ({"text": "hi", "chunk_frames": 0}, "codec_chunk_frames"),
])
def test_admit_refuses_naming_the_field(model: Any, kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        model.admit(BreezeRequest(**kwargs))
    assert err.value.param == field
    model.admit(BreezeRequest(text="hi"))  # and the next request is fine


def test_modes_and_defaults(model: Any) -> None:
    plain = model.admit(BreezeRequest(text="Hello"))
    tok = model.tokenizer.tok
    assert tok.id_to_token(int(plain.ids[1])) == "[S0]"  # the default voice
    assert plain.max_frames == spec.DEFAULT_MAX_NEW_TOKENS and plain.chunk_frames == spec.DEFAULT_CHUNK_FRAMES
    design = model.admit(BreezeRequest(text="Hello", voice="S2", instructions="calm"))
    assert [tok.id_to_token(int(i)) for i in design.ids[1:3]] == ["[S2]", spec.INSTRUCTION_BOS]
    clone = model.admit(BreezeRequest(text="Hello", ref_text="Hi", ref_codes=np.ones((4, 16), np.int64)))
    assert len(clone.segments) == 2 and clone.audio_tokens == 4
    assert int((clone.ids == model.info.audio_token_id).sum()) == 4
    assert int((clone.ids == model.info.audio_eos_token_id).sum()) == 1
    assert spec.mode_of(None, False) == "plain" and spec.mode_of("x", True) == "direction"


def test_eos_row_ends_the_utterance(model: Any) -> None:
    seq = model.admit(BreezeRequest(text="Hello", max_new_tokens=5))
    model.prefill([(seq, seq.prompt_tokens)])
    assert len(seq.pending) == 1 and seq.finished is None
    logits = np.full(spec.CODEBOOK_VOCAB + 1, -5.0, np.float32)
    logits[spec.EOS_CODE] = 1.0
    seq.logits = logits
    model._frames([seq])
    assert seq.finished == "stop" and len(seq.pending) == 1


def test_repetition_penalty_on_the_code0_history(model: Any) -> None:
    seq = model.admit(BreezeRequest(text="Hello"))
    logits = np.zeros(spec.CODEBOOK_VOCAB + 1, np.float32)
    logits[7], logits[9] = 1.05, 1.0
    seq.logits = logits
    assert model._code0(seq) == 7
    seq.history = [7, 7]
    assert model._code0(seq) == 9  # 1.05 / 1.1 < 1.0


def test_budget_and_context_cap(model: Any) -> None:
    seq = model.admit(BreezeRequest(text="Hello", max_new_tokens=3))
    model.prefill([(seq, seq.prompt_tokens)])
    while seq.finished is None:
        model.step([seq])
    assert seq.finished == "length" and seq.frames_out == 3
    long = model.admit(BreezeRequest(text="Hello " * 40, max_new_tokens=spec.MAX_NEW_TOKENS_LIMIT))
    assert long.max_frames == model.info.max_context - long.prompt_tokens
    with pytest.raises(InvalidRequest, match="positions") as err:
        model.admit(BreezeRequest(text="你" * 700))  # 3 byte-fallback tokens each: past 2048 positions
    assert err.value.param == "input"


def test_say_refuses_what_breeze_does_not_take(breeze_export: Path, tmp_path: Path, capsys: Any) -> None:
    from triton_tts.cli import main

    out = str(tmp_path / "a.wav")
    assert main(["say", "--artifacts", str(breeze_export), "-o", out, "--language", "English", "hi"]) == 2
    assert "--language is not supported by Breeze-TTS-2" in capsys.readouterr().err
    assert main(["say", "--artifacts", str(breeze_export), "-o", out, "--ref-text", "t", "hi"]) == 2
    assert "--ref-text needs --ref-audio" in capsys.readouterr().err
    assert main(["say", "--artifacts", str(breeze_export), "-o", out, "--voice", "S4", "--max-new-tokens", "4",
                 "hi"]) == 0
    assert "4 frames" in capsys.readouterr().out


def test_served_with_an_inline_vocoder_and_a_tiny_demo(breeze_export: Path) -> None:
    """A demo checkpoint for `serve`/`prepare --demo`; each checkpoint's speech_generation decodes
    inline and gets its own breeze_speech_encoder (voice features), suffixed when several are served."""
    from export.families import FAMILIES

    entry = FAMILIES[spec.FAMILY]
    assert [name for name, _ in entry.demo] == ["Breeze-TTS-2-tiny"]

    plan = deploy(spec.FAMILY, breeze_export, "breeze")
    assert plan.vocoder == {"breeze": "inline"} and plan.voice_features == {"breeze": spec.SPEECH_ENCODER}
    assert plan.models == [(spec.SPEECH_ENCODER, spec.SPEECH_ENCODER, {"artifacts_dir": str(breeze_export)})]
    assert plan.readiness == []
    two = deploy(spec.FAMILY, breeze_export, "a", "b")
    assert two.voice_features == {"a": f"{spec.SPEECH_ENCODER}_a", "b": f"{spec.SPEECH_ENCODER}_b"}
    assert [(m[0], m[1]) for m in two.models] == [(f"{spec.SPEECH_ENCODER}_a", spec.SPEECH_ENCODER),
                                                   (f"{spec.SPEECH_ENCODER}_b", spec.SPEECH_ENCODER)]
