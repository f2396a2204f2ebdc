"""CosyVoice3 under the shared engine (ttscore.runtime.engine.Generator) with its hop-stream vocoder: a
request's audio equals the offline route (generate.py: the same seed's tokens, then the whole decode under
the chunk mask), alone and batched with another request; the request rules of admit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cosyvoice3_fixtures import *  # noqa: F403  (cosyvoice3_tiny, cosyvoice3_artifacts)
from sequences import run_together

from ttscore.contract.errors import InvalidRequest

pytestmark = pytest.mark.unit


def _model(artifacts: Path, checkpoint: Path):
    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.families.cosyvoice3.model import CosyVoice3Model

    m = CosyVoice3Model(artifacts, read_manifest(artifacts))
    m.front_sessions(checkpoint)
    return m


def _clip(seed: int, n: int):
    from ttscore.runtime.families.cosyvoice3.frontend import ClipFeatures

    rng = np.random.default_rng(seed)
    return ClipFeatures(rng.integers(0, 6561, n).astype(np.int64), rng.standard_normal((2 * n, 80)).astype(np.float32),
                        rng.standard_normal(192).astype(np.float32))


def _offline(model, req) -> tuple[list[int], np.ndarray]:
    seq = model.admit(req)
    cond = seq.vocoder_prefix[0, 0]
    g = model.g
    toks = g.tokens(cond.prompt, seq.ras, seq.min_len, seq.max_len)
    return toks, g.audio(g.mel(cond.prompt, toks, cond.flow_noise, chunk=g.static_chunk)) if toks else np.zeros(0)


def test_engine_audio_equals_the_offline_route(cosyvoice3_tiny: Path, cosyvoice3_artifacts: Path) -> None:
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families.cosyvoice3.request import CosyVoice3Request

    model = _model(cosyvoice3_artifacts, cosyvoice3_tiny)
    long_text = "CosyVoice three speaks in many voices; numbers 0 1 2 3 4 5 6 7 8 9 and punctuation! How are you?"
    assert 2 * len(model.tokenizer.ids(long_text)) > 55  # no stop before two hops
    reqs = {"a": CosyVoice3Request(text=long_text, ref_text="the quick brown fox", clip=_clip(1, 11),
                                   seed=7, max_new_tokens=70),
            "b": CosyVoice3Request(text="she sells sea shells", ref_text="You are a helpful assistant.<|endofprompt|>hi",
                                   clip=_clip(2, 30), seed=3)}
    want = {k: _offline(model, r) for k, r in reqs.items()}
    assert len(want["a"][0]) > 50, "at least two hops"
    alone = {}
    for k, r in reqs.items():
        events = list(Generator(model).synthesize(r, req_id=k))
        alone[k] = np.concatenate([e.pcm for e in events])
        assert events[-1].final and events[-1].usage.audio_tokens == len(r.clip.speech_tokens)
        assert events[-1].usage.output_tokens == len(want[k][0])
        np.testing.assert_allclose(alone[k], want[k][1], rtol=0, atol=1e-5)
        if len(want[k][0]) > 50:  # audio before the last token: the first hop's
            assert len(events) >= 2 and len(events[0].pcm) > 0
    together = run_together(Generator(model), reqs)
    for k in reqs:
        np.testing.assert_allclose(together[k], want[k][1], rtol=0, atol=1e-5)


def test_admit_rules(cosyvoice3_tiny: Path, cosyvoice3_artifacts: Path) -> None:
    from ttscore.runtime.families.cosyvoice3.request import CosyVoice3Request

    model = _model(cosyvoice3_artifacts, cosyvoice3_tiny)
    clip = _clip(1, 5)
    for req, field in ((CosyVoice3Request(text="hi", ref_text="x"), "ref_audio"),
                       (CosyVoice3Request(text="hi", clip=clip), "ref_text"),
                       (CosyVoice3Request(text="hi", ref_text=" ", clip=clip), "ref_text"),
                       (CosyVoice3Request(text=" ", ref_text="x", clip=clip), "input"),
                       (CosyVoice3Request(text="hi", ref_text="x", clip=clip, max_new_tokens=0), "max_new_tokens"),
                       (CosyVoice3Request(text="hi", ref_text="x", clip=clip, max_new_tokens=4097), "max_new_tokens"),
                       (CosyVoice3Request(text="hi", ref_text="x", ref_audio=(np.zeros(8000, np.float32), 8000)), "ref_audio")):
        with pytest.raises(InvalidRequest) as e:
            model.admit(req)
        assert e.value.param == field, (req, e.value)
    seq = model.admit(CosyVoice3Request(text="hello world", ref_text="the dog", clip=clip))
    n_text = len(model.tokenizer.ids("hello world"))
    assert (seq.min_len, seq.max_len) == (2 * n_text, 20 * n_text)
    prefixed = model.tokenizer.ids("You are a helpful assistant.<|endofprompt|>the dog")
    assert seq.text_tokens == len(prefixed) + n_text
    seq = model.admit(CosyVoice3Request(text="hello world", ref_text="the dog", clip=clip, max_new_tokens=3))
    assert (seq.min_len, seq.max_len) == (3, 3)
    rng = np.random.default_rng(0)
    t = np.arange(22050) / 22050
    wav = (0.3 * np.sin(2 * np.pi * 200 * t) + 0.05 * rng.standard_normal(len(t))).astype(np.float32)
    seq = model.admit(CosyVoice3Request(text="hello", ref_text="the dog", ref_audio=(wav, 22050)))
    assert seq.audio_tokens == 25
