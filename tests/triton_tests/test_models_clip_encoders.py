"""The five reference-clip encoders (voice features) are one Triton model class,
ttscore.backend.clip_encoder, under the recording pb_utils fake: each model.py wires its family's
load/encode, refuses another family's export at initialize naming itself, and the shared class
answers probes without encoding, one response per clip, errors naming the field."""

from __future__ import annotations

import numpy as np
import pytest
from fakes.loader import committed_config, load_model_module, model_args

from ttscore.backend.settings import ModelSettingsError
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import InvalidRequest

pytestmark = pytest.mark.models

ENCODERS = ["audiovae_encoder", "breeze_speech_encoder", "codec_encoder", "dac_encoder", "prompt_encoder"]


@pytest.mark.parametrize("model", ENCODERS)
def test_each_encoder_refuses_another_familys_export_naming_itself(model, fake_pb_utils, dummy_artifacts):
    m = load_model_module(model).TritonPythonModel()  # dummy_artifacts: a Qwen3-TTS export
    with pytest.raises(ModelSettingsError, match=rf"^{model}: "):
        m.initialize(model_args(committed_config(model, artifacts_dir=str(dummy_artifacts))))


def test_the_shared_class_answers_probes_clips_and_errors(fake_pb_utils, dummy_artifacts):
    from ttscore.backend.clip_encoder import clip_encoder_model

    loaded, encoded = [], []

    def load(name, settings):
        loaded.append((name, settings.artifacts_dir))
        return 2.0

    def encode(tensors, scale):
        encoded.append(tensors["audio"].size)
        if tensors["audio"].size == 0:
            raise InvalidRequest("the clip is empty", "ref_audio")
        if tensors["audio"].size == 1:
            raise RuntimeError("the graph failed")
        return {"codes": (tensors["audio"] * scale).astype(np.float32)}

    m = clip_encoder_model("codec_encoder", load, encode)()
    m.initialize(model_args(committed_config("codec_encoder", artifacts_dir=str(dummy_artifacts))))
    assert loaded == [("codec_encoder", dummy_artifacts)]

    pb = fake_pb_utils
    probe = pb.InferenceRequest({"audio": np.zeros(3, np.float32)}, parameters={triton_io.HEALTH_PROBE_PARAMETER: True})
    good = pb.InferenceRequest({"audio": np.ones(4, np.float32)})
    empty = pb.InferenceRequest({"audio": np.zeros(0, np.float32)})
    broken = pb.InferenceRequest({"audio": np.zeros(1, np.float32)})
    responses = m.execute([probe, good, empty, broken])
    assert len(responses) == 4 and encoded == [4, 0, 1]  # the probe ran nothing
    assert not responses[0].has_error() and responses[0].as_dict() == {}
    assert responses[1].as_dict()["codes"].tolist() == [2.0] * 4
    assert responses[2].error().code() == pb.TritonError.INVALID_ARG
    assert triton_io.parse_error(responses[2].error().message()).param == "ref_audio"
    assert responses[3].error().code() == pb.TritonError.INTERNAL
    m.finalize()
    assert m.encoder is None
