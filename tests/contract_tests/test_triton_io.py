"""ttscore.contract.tensors: the wire contract (tensor tables, request decoding, chunk encoding, errors)."""

from __future__ import annotations

import numpy as np
import pytest

from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.engine import ChunkEvent, Usage
from ttscore.runtime.families import FAMILIES
from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest

pytestmark = pytest.mark.unit
request_from_tensors = FAMILIES["qwen3_tts"].request_from_tensors


# Each family's request dataclass, and the wire inputs its request_from_tensors turns into something
# else (VoxCPM2: ref_patches/ref_text become the reference or continuation prompt; Breeze-TTS-2:
# speaker becomes its voice tag; OmniVoice: ref_audio_codes fills ref_codes; CosyVoice3: the three
# prompt features become its clip).
REQUESTS = {
    "qwen3_tts": ("Qwen3TTSRequest", set()),
    "voxcpm2": ("VoxCPM2Request", {"ref_patches", "ref_text"}),
    "breeze_tts_2": ("BreezeRequest", {"speaker"}),
    "omnivoice": ("OmniVoiceRequest", {"ref_audio_codes"}),
    "gepard": ("GepardRequest", set()),
    "voxtral_tts": ("VoxtralRequest", set()),
    "fish_speech": ("FishRequest", {"ref_dac_codes"}),
    "cosyvoice3": ("CosyVoice3Request", {"prompt_speech_tokens", "prompt_mel", "prompt_embedding"}),
    "moss_tts_nano": ("MossRequest", set()),
}


def test_every_input_is_a_field_of_the_request_of_each_family_taking_it():
    import importlib

    assert set(REQUESTS) == set(FAMILIES)  # a new family adds its line here
    covered: set[str] = set()
    for family, (name, converted) in REQUESTS.items():
        request = getattr(importlib.import_module(f"ttscore.runtime.families.{family}.request"), name)
        inputs = {t.name for t in triton_io.SPEECH_INPUTS if family in t.families}
        assert converted <= inputs, family
        assert inputs - converted <= set(request.__dataclass_fields__), family
        covered |= inputs
    assert {t.name for t in triton_io.SPEECH_INPUTS} == covered
    # Only text is required, on the wire and in the dataclass.
    assert [t.name for t in triton_io.SPEECH_INPUTS if not t.optional] == ["text"]


def test_round_trip_of_every_field():
    fields = dict(
        text="héllo",
        task_type="base",
        speaker="vivian",
        language="English",
        instructions="calm",
        ref_text="ref",
        ref_codes=np.arange(32).reshape(2, 16),
        x_vector=np.linspace(0, 1, 8),
        x_vector_only=True,
        non_streaming_mode=False,
        max_new_tokens=12,
        seed=2**40,
        do_sample=False,
        temperature=0.5,
        top_k=7,
        top_p=0.9,
        repetition_penalty=1.1,
        subtalker_do_sample=True,
        subtalker_temperature=0.7,
        subtalker_top_k=3,
        subtalker_top_p=0.8,
        initial_chunk_frames=1,
        chunk_frames=25,
    )
    tensors = triton_io.request_tensors(**fields)
    assert set(tensors) == {t.name for t in triton_io.SPEECH_INPUTS if "qwen3_tts" in t.families}
    req = request_from_tensors(tensors)
    assert isinstance(req, Qwen3TTSRequest)
    for name, value in fields.items():
        got = getattr(req, name)
        if isinstance(value, np.ndarray):
            np.testing.assert_allclose(got, value, rtol=1e-6)
        elif isinstance(value, float):
            assert got == pytest.approx(value, rel=1e-6)
        else:
            assert got == value, name
    assert req.ref_codes.dtype == np.int64 and req.x_vector.dtype == np.float32


def test_absent_inputs_keep_dataclass_defaults():
    req = request_from_tensors(triton_io.request_tensors(text="hi"))
    assert req == Qwen3TTSRequest(text="hi")


def test_str_arrays_are_accepted_as_bytes():
    kwargs = triton_io.request_kwargs({"text": np.array(["hi"])})
    assert kwargs == {"text": "hi"}


@pytest.mark.parametrize(
    ("tensors", "param", "match"),
    [
        ({}, "text", "required"),
        ({"text": np.array([b"x"], object), "seed": np.array([1], np.int32)}, "seed", "must be INT64"),
        ({"text": np.array([b"x"], object), "x_vector": np.zeros((2, 2), np.float32)}, "x_vector", "shape"),
        ({"text": np.array([b"x"], object), "x_vector": np.array([np.inf], np.float32)}, "x_vector", "finite"),
        ({"text": np.array([b"x"], object), "do_sample": np.array([1], np.int32)}, "do_sample", "BOOL"),
        ({"text": np.array([b"x"], object), "nope": np.array([1])}, "nope", "unknown input"),
    ],
)
def test_invalid_tensors_name_the_tensor(tensors, param, match):
    with pytest.raises(InvalidRequest, match=match) as err:
        triton_io.request_kwargs(tensors)
    assert err.value.param == param


def test_chunk_outputs():
    ev = ChunkEvent("r", np.ones(4, np.float64), 2, False, None, Usage(3, 1, 2))
    out = triton_io.chunk_outputs(ev)
    assert out["audio"].dtype == np.float32 and out["audio"].shape == (4,)
    assert out["frames"].tolist() == [2] and out["frames"].dtype == np.int32
    assert out["finish_reason"].tolist() == [b""] and out["usage"].tolist() == [3, 1, 2]
    final = triton_io.chunk_outputs(ChunkEvent("r", np.zeros(0, np.float32), 0, True, "stop", Usage(3, 1, 5)))
    assert final["finish_reason"].tolist() == [b"stop"] and final["audio"].shape == (0,)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("INVALID_ARG [temperature]: must be > 0", ("INVALID_ARG", "temperature", "must be > 0")),
        ("INTERNAL: internal error", ("INTERNAL", None, "internal error")),
        ("in ensemble 'voice_features', INVALID_ARG [audio]: too short", ("INVALID_ARG", "audio", "too short")),
        (
            "[request id: c] inference input 'text' data-type is 'INT32', but model 'm' expects 'BYTES'",
            ("INVALID_ARG", "text", "[request id: c] inference input 'text' data-type is 'INT32', but model 'm' expects 'BYTES'"),
        ),
        ("Request for unknown model: 'x' is not found", ("", None, "Request for unknown model: 'x' is not found")),
    ],
)
def test_parse_error(text, expected):
    e = triton_io.parse_error(text)
    assert (e.code, e.param, e.message) == expected


def test_format_parse_round_trip():
    for code in triton_io.ERROR_CODES:
        for param in (None, "x_vector"):
            e = triton_io.WireError(code, "some: message [with] brackets", param)
            assert triton_io.parse_error(str(e)) == e
    with pytest.raises(ValueError):
        triton_io.format_error("NOPE", "x")


def test_arrays_are_copied_out_of_the_request():
    codes = np.zeros((2, 16), np.int64)
    xvec = np.ones(4, np.float32)
    kwargs = triton_io.request_kwargs({"text": np.array([b"x"], object), "ref_codes": codes, "x_vector": xvec})
    codes[:] = 5
    xvec[:] = 7
    assert kwargs["ref_codes"].max() == 0 and kwargs["x_vector"].max() == 1


def test_a_dead_stub_is_unavailable_not_a_server_bug():
    e = triton_io.parse_error("Stub process 'speech_generation_0_0' is not healthy.")
    assert e.code == triton_io.UNAVAILABLE
    assert triton_io.parse_error("some other server error").code == ""


def test_voxcpm2_request_from_tensors_maps_the_reference_modes_and_refuses_qwen_inputs():
    from ttscore.runtime.families.voxcpm2.request import VoxCPM2Request

    vox = FAMILIES["voxcpm2"].request_from_tensors
    patches = np.ones((3, 2, 4), np.float32)
    req = vox(triton_io.request_tensors(text="hi", seed=3, inference_timesteps=5, max_new_tokens=9))
    assert isinstance(req, VoxCPM2Request) and (req.seed, req.inference_timesteps, req.max_new_tokens) == (3, 5, 9)
    assert req.ref_patches is None and req.prompt_patches is None
    cloned = vox(triton_io.request_tensors(text="hi", ref_patches=patches))
    np.testing.assert_array_equal(cloned.ref_patches, patches)
    assert cloned.prompt_patches is None
    cont = vox(triton_io.request_tensors(text="hi", ref_patches=patches, ref_text="the prompt"))
    assert cont.ref_patches is None and cont.prompt_text == "the prompt"
    np.testing.assert_array_equal(cont.prompt_patches, patches)
    for bad, param in (
        (dict(speaker="vivian"), "speaker"),
        (dict(x_vector=np.ones(4)), "x_vector"),
        (dict(ref_text="no audio"), "ref_text"),
        (dict(ref_patches=np.full((1, 2, 4), np.nan, np.float32)), "ref_patches"),
    ):
        with pytest.raises(InvalidRequest) as exc:
            vox(triton_io.request_tensors(text="hi", **bad))
        assert exc.value.param == param
    # and the other way round: a Qwen3-TTS checkpoint refuses VoxCPM2's inputs
    with pytest.raises(InvalidRequest) as exc:
        request_from_tensors(triton_io.request_tensors(text="hi", ref_patches=patches))
    assert exc.value.param == "ref_patches"
