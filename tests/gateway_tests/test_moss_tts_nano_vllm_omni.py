"""What a MOSS-TTS-Nano Speech API request becomes, against vLLM-Omni 0.30.0's own code run from its release wheel
(tests/vllm_omni_source.py): its `MossTTSNanoAdapter` (validate + build, with the serving class's
`_apply_uploaded_speaker` and `_validate_ref_audio_format`), the model's sampling defaults and the deploy file's
seed. (The stereo downmix by the mean is inside the codec's decoder graph: its own tests.) The same requests through the project's adapter: refused for the same field, or planned
to the same text, frame budget and seed (the runtime's defaults where the plan leaves them out), sampling at the
same values.

Deliberate differences (export/moss_tts_nano/README.md, "Differences from vLLM-Omni 0.30.0"): an unknown `voice`
is refused even with `ref_audio` (vLLM-Omni ignores the name then); `sample_rate` is resampled, not refused;
`max_new_tokens` is bounded to 1..4096 (vLLM-Omni: >= 1, its 4096-token context the backstop); the sampling knobs
are taken in `extra_params` (vLLM-Omni always samples at their defaults)."""

from __future__ import annotations

import ast
import asyncio
import threading
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import gateway_plans as kit
import numpy as np
import pytest
import vllm_omni_source
import yaml
from vllm_omni_source import definitions

from gateway.planning import Deployment, NoStoredVoices, StoredVoice
from ttscore.contract.moss_tts_nano import rules as spec

pytestmark = pytest.mark.parity

ADAPTERS = "vllm_omni/entrypoints/openai/tts_adapters/moss_tts.py"
MODEL = "vllm_omni/model_executor/models/moss_tts_nano/modeling_moss_tts_nano.py"
SERVING = "vllm_omni/entrypoints/openai/serving_speech.py"
DEPLOY = "vllm_omni/deploy/moss_tts_nano.yaml"
CLIP = "data:audio/wav;base64,AAAA"
SERVER_CLIP = ([0.0, 0.1, -0.1], 16000, "key")  # what the server's clip resolver returns (wav, rate, cache key)


@dataclass
class VoRequest:
    """The fields of vLLM-Omni's OpenAICreateSpeechRequest its nano path reads."""

    input: str = "Hello."
    voice: str | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    max_new_tokens: int | None = None
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _serving_methods(names: tuple[str, ...]) -> dict[str, Any]:
    """Methods of the wheel's speech serving class, executed on their own (urlparse, a logger stand-in)."""
    tree = ast.parse(vllm_omni_source.source(SERVING))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and any(
        isinstance(m, ast.FunctionDef) and m.name == names[0] for m in n.body))
    body = [m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name in names]
    assert {m.name for m in body} == set(names)
    scope: dict[str, Any] = {"urlparse": urlparse, "logger": types.SimpleNamespace(info=lambda *a: None),
                             "OpenAICreateSpeechRequest": VoRequest}
    exec(compile(ast.Module(body=body, type_ignores=[]), SERVING, "exec"), scope)
    return {n: scope[n] for n in names}


class _Base:
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx


@dataclass
class _Prepared:
    prompt: Any
    tts_params: dict[str, Any]
    model_type: str
    output_policy: Any


class _Server:
    _tts_model_type = "moss_tts_nano"

    def __init__(self, seed_default: int) -> None:
        self.uploaded_speakers = {"mine": {"ref_text": "Stored transcript.", "embedding_source": "audio"}}
        self._speaker_cache: dict[str, Any] = {}
        self.seed_default = seed_default

    def _get_uploaded_audio_data(self, voice: str) -> str:
        return CLIP

    def _voice_created_at(self, voice: str) -> int:
        return 1

    async def _resolve_ref_audio(self, ref_audio: str) -> tuple[list[float], int, str]:
        return SERVER_CLIP


@pytest.fixture(scope="module")
def vo() -> Any:
    """vLLM-Omni's nano adapter over a stand-in server (its sampling params: the deploy file's defaults)."""
    deploy = yaml.safe_load(vllm_omni_source.source(DEPLOY))
    defaults = deploy["stages"][0]["default_sampling_params"]
    methods = _serving_methods(("_apply_uploaded_speaker", "_validate_ref_audio_format"))
    for name, fn in methods.items():
        setattr(_Server, name, fn)
    ns = definitions(ADAPTERS, ("_MossTTSAdapterBase", "MossTTSNanoAdapter"), ARTTSAdapter=_Base,
                     register_tts_adapter=lambda c: c, threading=threading, PreparedRequest=_Prepared,
                     OutputPolicy=lambda **k: k, tokens_input=lambda prompt_token_ids: {"ids": prompt_token_ids},
                     conditioning_cache_salt=lambda *a: "salt", apply_max_new_tokens=lambda s, r: s)
    server = _Server(defaults["seed"])
    adapter = ns.MossTTSNanoAdapter(types.SimpleNamespace(server=server, engine_client=None))
    sampling = [types.SimpleNamespace(seed=defaults["seed"])]

    def run(req: VoRequest) -> tuple[str | None, dict[str, Any] | None]:
        err = adapter.validate(req)
        if err:
            return err, None
        prepared = asyncio.run(adapter.build(req, sampling, req.ref_audio is not None and req.voice is None))
        return None, prepared.tts_params

    return run


class Uploads(NoStoredVoices):
    async def _features(self, model: str, prompt: bool) -> np.ndarray:
        return np.zeros((2, 16), np.int64)

    def resolve_voice(self, name: str) -> StoredVoice | None:
        if name == "mine":
            return StoredVoice(name="mine", ref_text="Stored transcript.", model_features=self._features)
        return None


@pytest.fixture
def dep(tmp_path: Path) -> Deployment:
    manifest = {"family": spec.FAMILY, "sample_rate": 48000, "samples_per_frame": 3840}
    return kit.one_checkpoint(tmp_path, "nano", manifest, "moss_codec_encoder_nano", Uploads())


def ours(dep: Deployment, req: VoRequest) -> tuple[Any, dict[str, Any] | None]:
    """The project's plan of the same request: (its 400, None) or (None, what it sends, the runtime's defaults
    filled in)."""
    from gateway.errors import APIError

    fields = {k: v for k, v in vars(req).items() if k != "extra" and v is not None}
    try:
        plan = kit.plan_for(dep, "nano", **fields, **req.extra)
    except APIError as exc:
        return exc, None
    sent = plan.generation_inputs(0, np.zeros((2, 16), np.int64))
    rules = spec.RULES
    return None, {
        "text": sent["text"].reshape(-1)[0].decode(),
        "max_new_frames": rules.field("max_new_tokens").resolve(
            int(sent["max_new_tokens"][0]) if "max_new_tokens" in sent else None),
        "seed": rules.field("seed").resolve(int(sent["seed"][0]) if "seed" in sent else None),
        "ref_text_sent": "ref_text" in sent,
        "codes_sent": "ref_audio_tokens" in sent,
    }


REQUESTS = [
    VoRequest(ref_audio=CLIP),
    VoRequest(ref_audio=CLIP, ref_text="A transcript, ignored."),
    VoRequest(input="  Hello,\tworld \n again  ", ref_audio=CLIP, max_new_tokens=12, seed=7),
    VoRequest(input="你好，今天天气很好。", ref_audio=CLIP, seed=0),
    VoRequest(voice="mine"),
    VoRequest(voice="MINE", ref_text="Given."),
    VoRequest(voice="mine", ref_audio=CLIP),
]


@pytest.mark.parametrize("req", REQUESTS, ids=range(len(REQUESTS)))
def test_a_request_becomes_what_vllm_omni_makes_of_it(vo: Any, dep: Deployment, req: VoRequest) -> None:
    err, params = vo(VoRequest(**vars(req)))
    assert err is None and params is not None
    mine_err, mine = ours(dep, req)
    assert mine_err is None and mine is not None
    assert params["mode"] == ["voice_clone"] and "prompt_text" not in params  # ref_text never reaches the model
    assert not mine["ref_text_sent"] and mine["codes_sent"]
    assert params["text"] == [mine["text"]]
    assert params.get("max_new_frames", [None])[0] in (None, mine["max_new_frames"])
    vo_frames = params.get("max_new_frames", [definitions(MODEL, ("_DEFAULT_MAX_NEW_FRAMES",))
                                              ._DEFAULT_MAX_NEW_FRAMES])[0]
    assert vo_frames == mine["max_new_frames"]
    assert params["seed"] == [mine["seed"]]


@pytest.mark.parametrize(("req", "param"), [
    (VoRequest(), "ref_audio"),
    (VoRequest(ref_text="a transcript alone"), "ref_audio"),
    (VoRequest(input="   ", ref_audio=CLIP), "input"),
    (VoRequest(voice="nobody"), "voice"),
    (VoRequest(voice="vivian"), "voice"),
])
def test_a_refusal_names_what_vllm_omni_refuses(vo: Any, dep: Deployment, req: VoRequest, param: str) -> None:
    err, _ = vo(VoRequest(**vars(req)))
    assert err is not None
    mine, _ = ours(dep, req)
    assert mine is not None and mine.param == param, (err, mine)
    if param == "ref_audio":
        assert err.rstrip(".") in mine.message  # vLLM-Omni's words, then "or an uploaded voice"
    if param == "voice":
        assert err.split(". Upload")[0] == mine.message.split(". Upload")[0]


def test_an_unknown_voice_with_ref_audio_is_refused_where_vllm_omni_ignores_it(vo: Any, dep: Deployment) -> None:
    req = VoRequest(voice="nobody", ref_audio=CLIP)
    assert vo(VoRequest(**vars(req)))[0] is None  # a deliberate difference (module docstring)
    mine, _ = ours(dep, req)
    assert mine is not None and mine.param == "voice"


def test_sampling_defaults_and_seed_are_vllm_omnis() -> None:
    names = ("_DEFAULT_TEXT_TEMPERATURE", "_DEFAULT_TEXT_TOP_P", "_DEFAULT_TEXT_TOP_K", "_DEFAULT_AUDIO_TEMPERATURE",
             "_DEFAULT_AUDIO_TOP_P", "_DEFAULT_AUDIO_TOP_K", "_DEFAULT_AUDIO_REPETITION_PENALTY",
             "_DEFAULT_MAX_NEW_FRAMES")
    model = definitions(MODEL, names)
    for name in names[:-1]:
        assert spec.KNOB_DEFAULTS[name.removeprefix("_DEFAULT_").lower()] == getattr(model, name), name
    assert model._DEFAULT_MAX_NEW_FRAMES == spec.DEFAULT_MAX_NEW_TOKENS
    source = vllm_omni_source.source(MODEL)
    assert "do_sample=True," in source and spec.KNOB_DEFAULTS["do_sample"] is True
    deploy = yaml.safe_load(vllm_omni_source.source(DEPLOY))
    assert deploy["stages"][0]["default_sampling_params"]["seed"] == spec.DEFAULT_SEED
    assert spec.RULES.field("seed").default == spec.DEFAULT_SEED

