"""Precomputed VoxCPM2 voices through the whole stack (the session's mixed deployment, tests/e2e_fixtures.py):
`triton-tts precompute-voice` writes one profile per prompt mode (reference, continuation,
ref_continuation) next to a Qwen3-TTS Base profile in one custom_voice_dir; a gateway started with it
lists the valid ones (a corrupt profile and one made with another AudioVAE are skipped), speaks
`voice=<profile>` with model=<VoxCPM2 id> exactly as the offline engine does with the same patches
(ref_continuation: speech_generation's ref_patches + prompt_patches + ref_text), and refuses a profile
for a model of the other family with a 400 naming `voice`.
"""

from __future__ import annotations

import argparse
import json

import httpx
import numpy as np
import pytest
import soundfile as sf
from gateway_fixtures import start_gateway

from gateway import encoding
from gateway.settings import Settings
from triton_tts.precompute import add_precompute_parser
from ttscore.backend.triton_server import free_port
from ttscore.contract import tensors as triton_io
from ttscore.contract.voicefile import MANIFEST_NAME
from ttscore.runtime.engine import Generator
from ttscore.runtime.families import FAMILIES
from ttscore.runtime.families.qwen3_tts.offline import precompute_voice

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Hello from a precomputed voice."
PATCHES = 6
SEED = 9
SPEECH = "/v1/audio/speech"
PROMPT = "A reference clip."
MODES = {"vox_ref": "reference", "vox_cont": "continuation", "vox_refcont": "ref_continuation"}


@pytest.fixture(scope="module")
def stack(e2e_triton, tmp_path_factory):
    work = tmp_path_factory.mktemp("vox-pre")
    ref = work / "ref.wav"
    t = np.arange(int(16000 * 1.2)) / 16000
    sf.write(ref, (0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32), 16000,
             subtype="FLOAT")
    voices = work / "voices"
    parser = argparse.ArgumentParser(prog="triton-tts")
    add_precompute_parser(parser.add_subparsers(dest="cmd", required=True))
    for name, mode in MODES.items():  # the spec's flag names
        argv = ["precompute-voice", "--artifacts", str(e2e_triton["artifacts"]["voxcpm2"]), "--voice-name", name,
                "--ref-audio", str(ref), "--mode", mode, "--output-dir", str(voices), "-q"]
        if mode != "reference":
            argv += ["--prompt-text", PROMPT]
        args = parser.parse_args(argv)
        assert args.func(args) == 0
    precompute_voice(e2e_triton["pipelines"]["base"], "qwen_pre", ref, mode="xvec", output_dir=voices)
    # Invalid profiles: a corrupt payload, and patches made with another AudioVAE.
    (voices / "broken.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    manifest = json.loads((voices / MANIFEST_NAME).read_text())
    manifest["voices"]["broken"] = {**manifest["voices"]["vox_ref"], "name": "broken", "file": "broken.safetensors"}
    other = json.loads(json.dumps(manifest["voices"]["vox_ref"]))
    other["checkpoint"]["audiovae_sha256"] = "0" * 64
    manifest["voices"]["vox_other"] = {**other, "name": "vox_other"}
    (voices / "vox_other.safetensors").write_bytes((voices / "vox_ref.safetensors").read_bytes())
    (voices / MANIFEST_NAME).write_text(json.dumps(manifest))

    cfg = {**e2e_triton["config"], "speaker_samples_dir": str(work / "speakers"), "health_interval_s": 0,
           "custom_voice_dir": str(voices)}
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
        yield {"http": client, "names": e2e_triton["names"], "model": e2e_triton["pipelines"]["voxcpm2"], "ref": ref}
    gw.should_exit = True
    thread.join(15)


def offline(stack, mode: str) -> np.ndarray:
    """The offline engine fed the tensors a profile of `mode` makes the gateway send."""
    model = stack["model"]
    wav, sr = sf.read(stack["ref"], dtype="float32")
    right, left = model.encode_reference(wav, sr, pad="right"), model.encode_reference(wav, sr, pad="left")
    fields = {"text": TEXT, "seed": SEED, "max_new_tokens": PATCHES}
    if mode == "reference":
        fields["ref_patches"] = right
    elif mode == "continuation":
        fields.update(ref_patches=left, ref_text=PROMPT)
    else:
        fields.update(ref_patches=right, prompt_patches=left, ref_text=PROMPT)
    request = FAMILIES["voxcpm2"].request_from_tensors(triton_io.request_tensors(**fields))
    if mode == "ref_continuation":
        assert request.ref_patches is not None and request.prompt_patches is not None
        assert request.prompt_text == PROMPT
    return np.concatenate([e.pcm for e in Generator(model, max_batch=1, chunk_policy="fixed").synthesize(request)])


def body(stack, **kw):
    return {"input": TEXT, "model": stack["names"]["voxcpm2"], "seed": SEED, "max_new_tokens": PATCHES, **kw}


def test_valid_profiles_are_listed_and_invalid_ones_skipped(stack):
    listed = set(stack["http"].get("/v1/audio/voices").json()["voices"])
    assert {*MODES, "qwen_pre"} <= listed
    assert not {"broken", "vox_other"} & listed


@pytest.mark.parametrize("name", list(MODES))
def test_voice_speaks_with_its_precomputed_patches(stack, name):
    r = stack["http"].post(SPEECH, json=body(stack, voice=name))
    assert r.status_code == 200, r.text
    rate, got = encoding.parse_wav(r.content)
    assert rate == 48000
    want = encoding.to_int16(offline(stack, MODES[name])).astype(np.int32)
    assert got.shape == want.shape
    assert np.max(np.abs(got.astype(np.int32) - want)) <= 1


def test_ref_continuation_differs_from_either_single_mode(stack):
    a, b, c = (offline(stack, m) for m in ("reference", "continuation", "ref_continuation"))
    for other in (a, b):
        assert other.shape != c.shape or not np.array_equal(other, c)


def test_profiles_are_refused_by_a_model_of_the_other_family(stack):
    http, names = stack["http"], stack["names"]
    r = http.post(SPEECH, json={"input": "Hi.", "model": names["base"], "voice": "vox_refcont"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "voice", r.text
    assert "VoxCPM2" in r.json()["error"]["message"]
    r = http.post(SPEECH, json={"input": "Hi.", "voice": "vox_ref"})  # routed among the Qwen3-TTS models
    assert r.status_code == 400 and r.json()["error"]["param"] == "voice", r.text
    r = http.post(SPEECH, json=body(stack, voice="qwen_pre"))
    assert r.status_code == 400 and r.json()["error"]["param"] == "voice", r.text
    assert "Qwen3-TTS" in r.json()["error"]["message"]
    r = http.post(SPEECH, json=body(stack, voice="vox_cont", ref_text="Another transcript."))
    assert r.status_code == 400 and r.json()["error"]["param"] == "ref_text", r.text
    # and both still work with their own family
    r = http.post(SPEECH, json={"input": "Hi.", "model": names["base"], "voice": "qwen_pre", "max_new_tokens": 4})
    assert r.status_code == 200, r.text
    assert stack["http"].post(SPEECH, json=body(stack, voice="vox_ref")).status_code == 200
