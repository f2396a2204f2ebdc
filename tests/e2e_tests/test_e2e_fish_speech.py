"""Fish Speech S2 Pro through the whole stack, served next to the other families in the session's shared
deployment (tests/e2e_fixtures.py): /v1/models lists it at 44.1 kHz; its audio through the raw stream, SSE and
the whole file, through the openai SDK and the WebSocket, equals the offline engine's with the same seed (the same frames, the
samples within one 16-bit step), text-only, cloned from `ref_audio` + `ref_text` (the codes of the
checkpoint's dac_encoder, equal to the offline encoder's) and from an uploaded voice (its codes computed at
upload, its stored transcript); `seed` and `extra_params` reach the samplers; every refused field is a 400
naming it and the next request succeeds.

A Fish Speech the project did not create (tests/fish_speech_foreign.py, in the same deployment): the reference
(tests/fish_speech_reference.py: vLLM-Omni 0.30.0's fish_speech modules) fed the sampling noise our runtime
draws for the request's seed makes codes whose decode by the reference's DAC equals the audio of
/v1/audio/speech with that seed, whole, raw stream and SSE (within the offline tolerance 1e-4 plus one 16-bit
step), text-only and cloned (the reference encodes the clip itself; the API's codes come from dac_encoder).
"""

from __future__ import annotations

import e2e_speech as e2e
import numpy as np
import pytest
from e2e_speech import SPEECH, data_url, same_audio, wav_at
from fish_speech_fixtures import reference

from gateway import encoding
from ttscore.contract import fish_speech as spec

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Hello, this is Fish Speech."
REF_TEXT = "A reference clip."
FRAMES = 8
SEED = 7
RATE = 44100
SAMPLES_PER_FRAME = 2048
AUDIO_ATOL = 1e-4  # the stated tolerance of the engine's audio against the reference's (float)
# The foreign checkpoint's requests: text-only and cloned (the stack's reference clip).
FOREIGN_CASES = ({"text": "A foreign checkpoint speaks.", "max_new_tokens": 9, "seed": 21},
                 {"text": "Cloned, through the API.", "max_new_tokens": 7, "seed": 22, "ref_text": REF_TEXT})


@pytest.fixture(scope="module")
def stack(e2e_triton, tmp_path_factory):
    ref = tmp_path_factory.mktemp("fish-ref") / "ref.wav"
    clip = e2e.write_tone(ref, RATE, 1.2)
    with e2e.family_stack(e2e_triton, tmp_path_factory, "fish_speech", "fish", ref=ref,
                          clip=clip, foreign_model=e2e_triton["pipelines"]["fish_speech_foreign"],
                          foreign_checkpoint=e2e_triton["checkpoints"]["fish_speech_foreign"]) as stack:
        yield stack


def clone_codes(model, clip: np.ndarray) -> np.ndarray:
    return model.a.encode(clip)


def offline(stack, text: str = TEXT, seed: int = SEED, model=None, **fields) -> tuple[np.ndarray, int]:
    """The offline engine with the tensors the gateway sends: (audio, frames made)."""
    audio, made = e2e.offline_audio(model or stack["model"], spec.FAMILY, text=text,
                                    max_new_tokens=fields.pop("max_new_tokens", FRAMES), seed=seed, **fields)
    assert made >= 1
    return audio, made


def body(stack, **kw):
    return {"input": TEXT, "model": stack["fish"], "max_new_tokens": FRAMES, "seed": SEED, **kw}


def wav_of(r) -> np.ndarray:
    return wav_at(r, RATE)


def assert_same_audio(got_int16: np.ndarray, want_float: np.ndarray, frames: int) -> None:
    same_audio(got_int16, want_float, frames * SAMPLES_PER_FRAME)


def test_models_lists_it_at_44k(http, stack):
    cards = e2e.model_cards(http)
    for key in ("fish_speech", "fish_speech_foreign"):
        card = cards[stack["names"][key]]
        assert (card["family"], card["sample_rate"]) == (spec.FAMILY, RATE)


@pytest.mark.parametrize("voice", [None, "default"])
def test_text_only_whole_raw_and_sse_equal_the_offline_engine(http, stack, voice):
    want, frames = offline(stack)
    got = e2e.three_ways(http, body(stack, **({"voice": voice} if voice else {})), RATE)
    e2e.assert_three_ways_equal(got, want, frames, frames * SAMPLES_PER_FRAME)


def test_cloned_whole_raw_and_sse_equal_the_offline_engine(http, stack):
    codes = clone_codes(stack["model"], stack["clip"])
    want, frames = offline(stack, ref_text=REF_TEXT, ref_dac_codes=codes)
    assert not np.array_equal(want, offline(stack)[0])  # the reference changes the audio
    got = e2e.three_ways(http, body(stack, ref_audio=data_url(stack["ref"]), ref_text=REF_TEXT), RATE)
    e2e.assert_three_ways_equal(got, want, frames, frames * SAMPLES_PER_FRAME)


def test_uploaded_voice_clones_with_its_codes_and_transcript(http, stack):
    e2e.upload_voice(http, stack["ref"], "fish_told", REF_TEXT)
    assert "fish_told" in http.get("/v1/audio/voices").json()["voices"]
    want, frames = offline(stack, ref_text=REF_TEXT, ref_dac_codes=clone_codes(stack["model"], stack["clip"]))
    got = e2e.three_ways(http, body(stack, voice="fish_told"), RATE)
    assert got.counted == frames
    for samples in got.audio:
        assert_same_audio(samples, want, frames)


def test_seed_and_sampling_knobs_reach_the_samplers(http, stack):
    first = wav_of(http.post(SPEECH, json=body(stack)))
    other = wav_of(http.post(SPEECH, json=body(stack, seed=SEED + 1)))
    assert other.shape != first.shape or not np.array_equal(first, other)
    assert_same_audio(other, *offline(stack, seed=SEED + 1))
    unseeded = {k: v for k, v in body(stack).items() if k != "seed"}
    assert_same_audio(wav_of(http.post(SPEECH, json=unseeded)), *offline(stack, seed=spec.DEFAULT_SEED))
    knobs = {"temperature": 0.5, "top_k": 5, "top_p": 0.7}
    cooler = wav_of(http.post(SPEECH, json=body(stack, extra_params=knobs)))
    assert_same_audio(cooler, *offline(stack, **knobs))
    # extra_params reach the Slow AR only, as in vLLM-Omni 0.30.0: at temperature 0 the semantic codes are
    # greedy and the Fast AR still samples the residual codes at 0.8/30/0.9 from the seed's noise.
    greedy = wav_of(http.post(SPEECH, json=body(stack, seed=1, extra_params={"temperature": 0})))
    assert_same_audio(greedy, *offline(stack, seed=1, temperature=0))
    other = wav_of(http.post(SPEECH, json=body(stack, seed=2, extra_params={"temperature": 0})))
    assert greedy.shape != other.shape or not np.array_equal(greedy, other)


def test_whole_file_formats_and_rates(http, stack):
    for fmt in ("flac", "mp3", "pcm"):
        r = http.post(SPEECH, json=body(stack, response_format=fmt))
        assert r.status_code == 200 and r.headers["content-type"] == encoding.MEDIA_TYPES[fmt], r.text
    r = http.post(SPEECH, json=body(stack, response_format="opus", sample_rate=48000))  # an Opus rate: resampled
    assert r.status_code == 200 and r.content
    rate, _ = encoding.parse_wav(http.post(SPEECH, json=body(stack, sample_rate=16000)).content)
    assert rate == 16000


def test_openai_sdk(stack):
    client = e2e.sdk(stack["url"])
    want, frames = offline(stack)
    samples = e2e.sdk_wav(client, RATE, model=stack["fish"], voice="default", input=TEXT,
                          extra_body={"max_new_tokens": FRAMES, "seed": SEED})
    assert_same_audio(samples, want, frames)
    want, frames = offline(stack, ref_text=REF_TEXT, ref_dac_codes=clone_codes(stack["model"], stack["clip"]))
    pcm = e2e.sdk_pcm(client, {"max_new_tokens": FRAMES, "seed": SEED, "ref_audio": data_url(stack["ref"]),
                               "ref_text": REF_TEXT}, model=stack["fish"], voice="default", input=TEXT)
    assert_same_audio(pcm, want, frames)


@pytest.mark.parametrize("cloned", [False, True])
def test_websocket(stack, cloned):
    clone = {"ref_audio": data_url(stack["ref"]), "ref_text": REF_TEXT} if cloned else {}
    codes = {"ref_text": REF_TEXT, "ref_dac_codes": clone_codes(stack["model"], stack["clip"])} if cloned else {}
    want, frames = offline(stack, **codes)
    config = {"model": stack["fish"], "voice": "default", "max_new_tokens": FRAMES, "seed": SEED, **clone}
    assert_same_audio(e2e.websocket_audio(stack["url"], config, TEXT), want, frames)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"input": "   "}, "input"),
        ({"voice": "vivian"}, "voice"),  # another family's preset: no built-in speakers
        ({"voice": "alloy"}, "voice"),
        ({"ref_audio": "REF"}, "ref_text"),  # cloning needs the transcript
        ({"ref_text": "A transcript."}, "ref_text"),  # a transcript without a clip
        ({"ref_audio": "data:audio/wav;base64,AAAA", "ref_text": "T."}, "ref_audio"),  # not audio
        ({"response_format": "opus"}, "sample_rate"),  # 44.1 kHz is not an Opus rate
        ({"sample_rate": 44100, "response_format": "opus"}, "sample_rate"),
        ({"response_format": "flac", "stream_format": "audio"}, "response_format"),  # flac does not stream
        ({"speed": 1.5, "stream": True, "response_format": "pcm"}, "speed"),  # speed: whole clips only
        ({"max_new_tokens": 0}, "max_new_tokens"),  # 1..4096
        ({"max_new_tokens": 4097}, "max_new_tokens"),
        ({"seed": -1}, "seed"),
        ({"extra_params": {"temperature": 11}}, "extra_params"),
        ({"extra_params": {"top_p": 0}}, "extra_params"),
        ({"extra_params": {"top_k": 2.5}}, "extra_params"),
        ({"extra_params": {"cfg_alpha": 1.0}}, "extra_params"),  # temperature/top_k/top_p only
        *e2e.OTHER_FAMILIES_FIELDS,
    ],
)
def test_refused_field_is_a_400_naming_it(http, stack, extra, param):
    if extra.get("ref_audio") == "REF":
        extra = {**extra, "ref_audio": data_url(stack["ref"])}
    e2e.assert_refused(http.post(SPEECH, json=body(stack, **extra)), param)


def test_the_next_request_after_a_refusal_is_served(http, stack):
    e2e.assert_served_after_a_refusal(http, body(stack, max_new_tokens=0), body(stack), RATE)


@pytest.fixture(scope="module")
def foreign_reference(stack) -> dict:
    """The reference's codes, stop flags and audio per FOREIGN_CASES, each made with the noise our runtime draws
    for its seed (the cloned case encodes the stack's clip with the reference's own DAC encoder)."""
    from ttscore.runtime.families.fish_speech.artifacts import request_noise

    t = stack["foreign_model"].a.tables
    inputs: dict[str, np.ndarray] = {}
    for i, case in enumerate(FOREIGN_CASES):
        inputs[f"q_slow_{i}"], inputs[f"q_fast_{i}"] = request_noise(
            case["seed"], case["max_new_tokens"], t.codebook_size + 1, t.num_codebooks)
        if "ref_text" in case:
            inputs[f"ref_audio_{i}"] = stack["clip"]
    return reference(stack["foreign_checkpoint"], list(FOREIGN_CASES), inputs)


@pytest.mark.parametrize("case", range(len(FOREIGN_CASES)))
def test_foreign_checkpoint_through_the_api_equals_the_reference(http, stack, foreign_reference, case):
    c = FOREIGN_CASES[case]
    codes, want = foreign_reference[f"codes_{case}"], foreign_reference[f"audio_{case}"]
    assert 1 < len(codes) <= c["max_new_tokens"]
    assert want.size == len(codes) * SAMPLES_PER_FRAME and np.abs(encoding.to_int16(want)).max() > 10  # not silence
    payload = {"input": c["text"], "model": stack["names"]["fish_speech_foreign"],
               "max_new_tokens": c["max_new_tokens"], "seed": c["seed"]}
    if "ref_text" in c:
        payload |= {"ref_audio": data_url(stack["ref"]), "ref_text": c["ref_text"]}
        np.testing.assert_array_equal(clone_codes(stack["foreign_model"], stack["clip"]),
                                      foreign_reference[f"ref_codes_{case}"])
    e2e.assert_three_ways_within(e2e.three_ways(http, payload, RATE), want, len(codes), AUDIO_ATOL)
