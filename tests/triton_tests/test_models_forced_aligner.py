"""model_repository/forced_aligner under the recording pb_utils fake, over the tiny aligner export: a request's
words, times and character spans are the runtime's, a health probe runs nothing, each bad request gets INVALID_ARG
naming its field while the others in the batch are answered, and another export is refused at initialize naming
the model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from aligner_fixtures import *  # noqa: F403  (aligner_tiny, aligner_artifacts)
from fakes.loader import committed_config, load_model_module, model_args

from ttscore.backend.settings import ModelSettingsError
from ttscore.contract import tensors as triton_io

pytestmark = pytest.mark.models

TEXT = "Hello, world! How are you?"


def _request(pb: object, audio: np.ndarray, rate: int = 24000, text: str | None = TEXT, language: str = "English",
             **params: object) -> object:
    tensors = {"audio": audio.astype(np.float32), "sample_rate": np.array([rate], np.int32),
               "language": np.array([language.encode()], dtype=np.object_)}
    if text is not None:
        tensors["text"] = np.array([text.encode()], dtype=np.object_)
    return pb.InferenceRequest(tensors, parameters=params)  # type: ignore[attr-defined]


def test_forced_aligner_answers_words_probes_and_errors(fake_pb_utils: object, aligner_artifacts: Path) -> None:
    from ttscore.runtime.qwen3_forced_aligner.model import ForcedAligner

    pb = fake_pb_utils
    m = load_model_module("forced_aligner").TritonPythonModel()
    m.initialize(model_args(committed_config("forced_aligner", artifacts_dir=str(aligner_artifacts))))
    clip = (np.random.default_rng(0).standard_normal(36000) * 0.1).astype(np.float32)  # 1.5 s at 24 kHz
    requests = [_request(pb, clip), _request(pb, clip, **{triton_io.HEALTH_PROBE_PARAMETER: True}),
                _request(pb, clip, text=None),
                _request(pb, np.full(4000, np.nan)), _request(pb, clip, rate=0),
                _request(pb, clip, text="")]
    good, probe, missing, nan, rate, empty = m.execute(requests)
    want = ForcedAligner(aligner_artifacts).align(clip, TEXT, "English", sample_rate=24000)
    out = good.as_dict()
    assert [t.decode() for t in out["word_text"]] == [w.text for w in want] == ["Hello", "world", "How", "are", "you"]
    assert out["word_start"].tolist() == pytest.approx([w.start for w in want])
    assert out["word_end"].tolist() == pytest.approx([w.end for w in want])
    assert [TEXT[a:b] for a, b in zip(out["char_start"], out["char_end"], strict=True)] == [
        "Hello,", "world!", "How", "are", "you?"]
    assert not probe.has_error() and probe.as_dict() == {}
    for response, field in ((missing, "text"), (nan, "audio"), (rate, "sample_rate")):
        assert response.error().code() == pb.TritonError.INVALID_ARG, field
        assert triton_io.parse_error(response.error().message()).param == field
    assert empty.as_dict()["word_text"].shape == (0,)
    m.finalize()


def test_forced_aligner_refuses_a_speech_export(fake_pb_utils: object, dummy_artifacts: Path) -> None:
    m = load_model_module("forced_aligner").TritonPythonModel()
    with pytest.raises(ModelSettingsError, match=r"^forced_aligner: "):
        m.initialize(model_args(committed_config("forced_aligner", artifacts_dir=str(dummy_artifacts))))
