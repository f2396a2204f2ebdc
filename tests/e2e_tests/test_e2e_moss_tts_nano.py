"""MOSS-TTS-Nano through the whole stack, served next to the other families in the session's shared deployment
(tests/e2e_fixtures.py): /v1/models lists it at 48 kHz; cloned from `ref_audio` (the codes of the checkpoint's
moss_codec_encoder, equal to the offline encoder's) or an uploaded voice (its codes computed at upload), its audio
through the whole file, the raw stream and SSE equals the offline engine's with the same fields (greedy with
`extra_params.do_sample` false, and sampled from the seed, 42 without one); `ref_text` changes nothing; a long
text is generated chunk by chunk with its pauses; every refused field is a 400 naming it and the next request
succeeds.

A MOSS-TTS-Nano the project did not create (tests/moss_tts_nano_fixtures.py: LM and codec from mlx-audio's own
classes, in the same deployment) through /v1/audio/speech, greedy: its frames equal mlx-audio's
`generate_audio_token_ids` on the same prompt, its reference codes mlx-audio's `encode_audio`'s, and the audio of
the whole file, the raw stream and SSE is mlx-audio's decode of those frames, downmixed to mono by the mean, within
1e-3."""

from __future__ import annotations

import json

import e2e_speech as e2e
import numpy as np
import pytest
from e2e_speech import SPEECH, data_url, wav_at
from moss_tts_nano_fixtures import LM_SCRIPT

from ttscore.contract.moss_tts_nano import rules as spec

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Good morning, everyone!"  # the tiny checkpoint makes frames for it at seed 42
FRAMES = 10
RATE = 48000
SPF = 3840
GREEDY = {"do_sample": False}


@pytest.fixture(scope="module")
def stack(e2e_triton, tmp_path_factory):
    ref = tmp_path_factory.mktemp("moss-ref") / "ref.wav"
    clip = e2e.write_tone(ref, RATE, 1.2)
    with e2e.family_stack(e2e_triton, tmp_path_factory, "moss_tts_nano", "moss", ref=ref, clip=clip,
                          foreign_model=e2e_triton["pipelines"]["moss_tts_nano_foreign"],
                          foreign_checkpoint=e2e_triton["checkpoints"]["moss_tts_nano_foreign"]) as stack:
        stack["codes"] = stack["model"].encode(clip)  # a 48 kHz clip: the encoder's codes, no resampling
        yield stack


def offline(stack, text: str = TEXT, **fields) -> tuple[np.ndarray, int]:
    """The offline engine with the tensors the gateway sends: (audio, frames made)."""
    extra = fields.pop("extra_params", {})
    audio, made = e2e.offline_audio(stack["model"], spec.FAMILY, text=text, ref_audio_tokens=stack["codes"],
                                    max_new_tokens=fields.pop("max_new_tokens", FRAMES), **extra, **fields)
    assert made >= 1
    return audio, made


def body(stack, **kw):
    return {"input": TEXT, "model": stack["moss"], "max_new_tokens": FRAMES, "ref_audio": data_url(stack["ref"]),
            **kw}


def test_models_lists_it_at_48k(http, stack):
    card = e2e.model_cards(http)[stack["moss"]]
    assert (card["family"], card["sample_rate"]) == (spec.FAMILY, RATE)


@pytest.mark.parametrize("fields", [{"extra_params": GREEDY}, {"seed": 7}, {}], ids=["greedy", "seed 7", "seed 42"])
def test_cloned_whole_raw_and_sse_equal_the_offline_engine(http, stack, fields):
    want, frames = offline(stack, **fields)
    got = e2e.three_ways(http, body(stack, **fields), RATE)
    e2e.assert_three_ways_equal(got, want, frames, frames * SPF)


def test_ref_text_is_ignored_and_sampling_knobs_reach_the_samplers(http, stack):
    plain = wav_at(http.post(SPEECH, json=body(stack, extra_params=GREEDY)), RATE)
    told = wav_at(http.post(SPEECH, json=body(stack, extra_params=GREEDY, ref_text="A transcript.")), RATE)
    assert np.array_equal(plain, told)
    knobs = {"audio_temperature": 1.3, "audio_top_k": 5, "audio_top_p": 0.8, "audio_repetition_penalty": 1.0}
    got = wav_at(http.post(SPEECH, json=body(stack, seed=3, extra_params=knobs)), RATE)
    want, frames = offline(stack, seed=3, extra_params=knobs)
    e2e.same_audio(got, want, frames * SPF)


def test_uploaded_voice_clones_with_its_codes(http, stack):
    e2e.upload_voice(http, stack["ref"], "moss_voice")
    want, frames = offline(stack, extra_params=GREEDY)
    payload = {k: v for k, v in body(stack, voice="moss_voice", extra_params=GREEDY).items() if k != "ref_audio"}
    got = e2e.three_ways(http, payload, RATE)
    e2e.assert_three_ways_equal(got, want, frames, frames * SPF)


def test_long_text_is_generated_chunk_by_chunk(http, stack):
    text = "One two three. " + "This sentence has quite a few more words in it, so it is long. " * 3
    want, frames = offline(stack, text=text, max_new_tokens=3, extra_params=GREEDY)
    got = e2e.three_ways(http, body(stack, input=text, max_new_tokens=3, extra_params=GREEDY), RATE)
    assert len(want) > frames * SPF  # the pauses between the chunks
    e2e.assert_three_ways_equal(got, want, frames)


@pytest.mark.parametrize(("fields", "param"), [
    ({"ref_audio": None}, "ref_audio"),
    ({"ref_audio": None, "ref_text": "no clip"}, "ref_audio"),
    ({"voice": "vivian"}, "voice"),
    ({"extra_params": {"temperature": 0.5}}, "extra_params"),
    ({"extra_params": {"do_sample": "no"}}, "extra_params"),
    ({"max_new_tokens": 4097}, "max_new_tokens"),
    ({"instructions": "calm"}, "instructions"),
    ({"language": "English"}, "language"),
])
def test_refused_fields_name_the_field(http, stack, fields, param):
    refused = {k: v for k, v in body(stack, **fields).items() if v is not None}
    e2e.assert_refused(http.post(SPEECH, json=refused), param)


def test_served_after_a_refusal(http, stack):
    e2e.assert_served_after_a_refusal(http, body(stack, max_new_tokens=0), body(stack, extra_params=GREEDY), RATE)


def test_a_foreign_checkpoint_matches_mlx_audio_through_the_api(http, stack):
    import refenv

    model, ckpt = stack["foreign_model"], stack["foreign_checkpoint"]
    codes = model.encode(stack["clip"])
    theirs = refenv.run("mlx", LM_SCRIPT.parent / "moss_tts_nano_codec_mlx.py", {"audio_0": stack["clip"]}, [str(ckpt)])
    assert np.array_equal(codes, theirs["codes_0"])  # the reference's codes, exactly
    text, frames = "A foreign checkpoint speaks.", 8
    ref = refenv.run("mlx", LM_SCRIPT, {"rows": model.prompt_rows(text, codes)},
                     ["generate", str(ckpt), json.dumps({"do_sample": False, "max_frames": frames})])["frames"]
    events = e2e.offline_events(model, spec.FAMILY, text=text, ref_audio_tokens=codes, max_new_tokens=frames,
                                do_sample=False)
    ours = np.concatenate([e.codes for e in events]).reshape(-1, 16)
    assert len(ref) >= 2 and np.array_equal(ours, ref)
    decoded = refenv.run("mlx", LM_SCRIPT.parent / "moss_tts_nano_codec_mlx.py", {"codes_0": ref}, [str(ckpt)])
    want = decoded["whole_0"].mean(axis=1).astype(np.float32)  # [samples, 2] -> mono, as vLLM-Omni serves it
    offline_pcm = np.concatenate([e.pcm for e in events])
    peak = float(np.max(np.abs(want)))
    assert np.max(np.abs(offline_pcm - want)) <= 1e-3 * max(1.0, peak)  # random weights: peaks past 1
    name = stack["names"]["moss_tts_nano_foreign"]
    got = e2e.three_ways(http, {"input": text, "model": name, "max_new_tokens": frames,
                                "ref_audio": data_url(stack["ref"]), "extra_params": GREEDY}, RATE)
    # Served as 16-bit PCM: the reference's audio clipped to the int16 range, within 1e-3 (plus one step).
    e2e.assert_three_ways_within(got, np.clip(want, -1.0, 32767 / 32768), len(ref), 1e-3)
