"""CosyVoice3's exported graphs against the reference (tests/cosyvoice3_reference.py: vLLM-Omni 0.30.0's
flow and HiFT around Qwen2ForCausalLM, vLLM-Omni's own `_ras_sample_one`) with every source of randomness
fed identically: the speech tokens exactly, mel and audio within the stated tolerances, for vLLM-Omni's
offline decode (full attention) and upstream's streaming mask (25-token chunks); and the streaming hop
scheme equal to the whole-utterance decode under that mask, its first audio out after the first hop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cosyvoice3_fixtures import *  # noqa: F403  (cosyvoice3_tiny, cosyvoice3_artifacts)
from cosyvoice3_fixtures import reference

pytestmark = pytest.mark.unit

MEL_TOLERANCE = 1e-4  # max abs error of the mel (values of order 1-5; measured ~3e-6 on tiny)
AUDIO_TOLERANCE = 1e-4  # max abs error of the waveform (measured ~2e-6 on tiny)
STREAM_TOLERANCE = 1e-5  # streamed vs whole decode under the chunk mask (measured ~1.5e-6: float order only)


def _prompt(graphs, seed: int, n_prompt: int, text: list[int]):
    from ttscore.runtime.families.cosyvoice3.generate import Prompt

    rng = np.random.default_rng(seed)
    return Prompt(np.array(text, np.int64), rng.integers(0, graphs.speech_token_size, n_prompt).astype(np.int64),
                  rng.standard_normal((2 * n_prompt, graphs.mel_dim)).astype(np.float32),
                  rng.standard_normal(192).astype(np.float32))


def _inputs(graphs, cases) -> dict[str, np.ndarray]:
    from ttscore.runtime.families.cosyvoice3 import sampling

    inputs = {"hift_rand_ini": np.zeros(graphs.harmonics + 1, np.float32),
              "hift_sine_noise": sampling.sine_table(graphs.sample_rate, graphs.harmonics),
              "hift_uv_noise": np.zeros(1, np.float32)}
    for i, (prompt, ras, flow) in enumerate(cases):
        inputs.update({f"prompt_tokens_{i}": prompt.speech_tokens, f"prompt_feat_{i}": prompt.feat,
                       f"embedding_{i}": prompt.embedding, f"ras_noise_{i}": ras, f"flow_noise_{i}": flow})
    return inputs


def check_parity(checkpoint: Path, artifacts: Path, seeds: tuple[int, ...] = (5, 9), min_len: int = 10) -> None:
    """Each seed: tokens (RAS noise from the seed, no stop before `min_len`), then the mel/audio with full
    attention and with the chunk mask, ours vs the reference fed the same noise (also relative to the
    audio's peak: 1e-3); the stream equals the chunked whole."""
    from ttscore.runtime.families.cosyvoice3 import sampling
    from ttscore.runtime.families.cosyvoice3.generate import CosyVoice3Graphs

    g = CosyVoice3Graphs(artifacts)
    steps, n_prompt, text = 60, 7, [11, 12, 13, 14, 15]
    cases, reqs, ours = [], [], []
    for seed in seeds:
        prompt = _prompt(g, seed, n_prompt, text)
        ras = sampling.ras_noise(seed, steps, g.speech_token_size + 200)
        flow = sampling.flow_noise(seed, g.mel_dim, 2 * (steps + n_prompt))
        toks = g.tokens(prompt, ras, min_len, steps)
        whole = g.mel(prompt, toks, flow)
        chunked = g.mel(prompt, toks, flow, chunk=g.static_chunk)
        ours.append((toks, whole, g.audio(whole), chunked, g.audio(chunked), prompt, flow))
        for mask in (False, True):
            cases.append((prompt, ras, flow))
            reqs.append({"text_ids": text, "max_new_tokens": steps, "min_new_tokens": min_len, "chunk_mask": mask})
    out = reference(checkpoint, reqs, _inputs(g, cases))
    for k, (toks, mel, audio, cmel, caudio, prompt, flow) in enumerate(ours):
        assert len(toks) > 2 * g.chunk_tokens, "long enough for two streaming hops"
        for j, (m, a) in enumerate(((mel, audio), (cmel, caudio))):
            i = 2 * k + j
            np.testing.assert_array_equal(out[f"tokens_{i}"], np.array(toks, np.int64))
            np.testing.assert_allclose(m, out[f"mel_{i}"], rtol=0, atol=MEL_TOLERANCE)
            np.testing.assert_allclose(a, out[f"audio_{i}"], rtol=0, atol=AUDIO_TOLERANCE)
            assert np.abs(a - out[f"audio_{i}"]).max() <= 1e-3 * np.abs(a).max()
        assert np.abs(mel - cmel).max() > 1e-3, "the chunk mask changes the mel"
        streamed = np.concatenate(list(g.stream(prompt, toks, flow)))
        np.testing.assert_allclose(streamed, caudio, rtol=0, atol=STREAM_TOLERANCE)


def test_tokens_mel_audio_match_the_reference(cosyvoice3_tiny: Path, cosyvoice3_artifacts: Path) -> None:
    check_parity(cosyvoice3_tiny, cosyvoice3_artifacts)


def test_stream_first_audio_after_the_first_hop(cosyvoice3_artifacts: Path) -> None:
    """The first piece comes out once the first hop's tokens (and the look-ahead) are in, long before the
    last token; the pieces join into the whole decode under the chunk mask."""
    from ttscore.runtime.families.cosyvoice3 import sampling
    from ttscore.runtime.families.cosyvoice3.generate import WITHHELD_FRAMES, CosyVoice3Graphs

    g = CosyVoice3Graphs(cosyvoice3_artifacts)
    n_prompt = 9
    prompt = _prompt(g, 1, n_prompt, [5, 6, 7])
    toks = list(np.random.default_rng(2).integers(0, g.speech_token_size, 90))
    flow = sampling.flow_noise(1, g.mel_dim, 2 * (len(toks) + n_prompt))
    consumed: list[int] = []

    def arriving():
        for t in toks:
            consumed.append(t)
            yield int(t)

    stream = g.stream(prompt, arriving(), flow)
    first = next(stream)
    first_hop = 2 * g.chunk_tokens - n_prompt  # prompt (9) + 41 = 50: two chunks
    assert len(consumed) == first_hop + g.lookahead < len(toks)
    assert len(first) == (2 * first_hop - WITHHELD_FRAMES) * g.samples_per_mel
    rest = list(stream)
    assert len(rest) >= 2
    whole = g.audio(g.mel(prompt, toks, flow, chunk=g.static_chunk))
    np.testing.assert_allclose(np.concatenate([first, *rest]), whole, rtol=0, atol=STREAM_TOLERANCE)


def test_long_stream_costs_each_hop_the_same_and_equals_the_whole(cosyvoice3_artifacts: Path) -> None:
    """Twelve hops: each runs the flow on its own 50 new frames only (flow_velocity fed the position convs'
    bounded context and, per layer, exactly the past frames' K/V as a prefix of the stream's buffer, no slack
    slots; the graph writes the new frames' K/V into the buffer's next slots) and HiFT on a bounded window, the
    source phase carried; the pieces still join into the whole decode under the chunk mask."""
    from ttscore.contract import cosyvoice3 as spec
    from ttscore.runtime.families.cosyvoice3 import sampling
    from ttscore.runtime.families.cosyvoice3.generate import WITHHELD_FRAMES, CosyVoice3Graphs, HopStream

    g = CosyVoice3Graphs(cosyvoice3_artifacts)
    n_prompt = 30
    prompt = _prompt(g, 3, n_prompt, [5, 6, 7])
    toks = [int(t) for t in np.random.default_rng(4).integers(0, g.speech_token_size, 12 * g.chunk_tokens + 7)]
    flow = sampling.flow_noise(3, g.mel_dim, 2 * (len(toks) + n_prompt))
    hops = HopStream(g, prompt, flow)
    hop_graph = g.graphs["flow_velocity"]
    calls: list[tuple[int, int, int, bool]] = []  # per graph call: x's window, the past fed, frames held, in place
    run_bound = hop_graph.run_bound

    def recording(feeds, into=None):
        past = feeds[spec.past_key(0)]
        buf = hops.kv
        shares = buf is not None and np.shares_memory(past, buf) and np.shares_memory(into[spec.new_key(0)], buf)
        calls.append((feeds["x"].shape[2], past.shape[0], hops.frames, shares))
        return run_bound(feeds, into)

    hop_graph.run_bound = recording
    pieces, fed, windows = [], [], []
    per_frame = hops.bytes_per_frame
    for t in toks:
        before = len(calls)
        piece = hops.push([t])
        if len(calls) > before:
            fed.append(hops.frames)
            windows.append(hops.mel.shape[1])
            assert hops.cache_bytes == hops.frames * per_frame
        pieces.append(piece)
    pieces.append(hops.finish())
    steps = np.diff(fed)
    assert len(fed) >= 11 and (steps == 2 * g.chunk_tokens).all(), fed
    assert max(windows[2:]) <= hops.window + 2 * g.chunk_tokens + WITHHELD_FRAMES, windows
    # every call after the first hop: the past is exactly the frames held, read in place; x's window is bounded
    assert all(past == held and shares for _, past, held, shares in calls[spec.FLOW_STEPS:]), calls[spec.FLOW_STEPS:]
    assert max(w for w, *_ in calls[spec.FLOW_STEPS:]) <= spec.FLOW_CONV_CONTEXT + 2 * g.chunk_tokens, calls
    assert hops.capacity == flow.shape[1]  # reserved once, never grown
    whole = g.audio(g.mel(prompt, toks, flow, chunk=g.static_chunk))
    np.testing.assert_allclose(np.concatenate(pieces), whole, rtol=0, atol=STREAM_TOLERANCE)


def test_a_stream_past_its_cache_budget_recomputes_the_prefix_and_still_equals_the_whole(
        cosyvoice3_artifacts: Path) -> None:
    """A flow K/V cache budget of about three hops: the stream frees its cache when the next hop would pass it and
    recomputes each later hop over the whole prefix; memory stays bounded and the audio is the whole decode's."""
    from ttscore.runtime.families.cosyvoice3 import sampling
    from ttscore.runtime.families.cosyvoice3.generate import CosyVoice3Graphs, HopStream

    g = CosyVoice3Graphs(cosyvoice3_artifacts)
    n_prompt = 30
    prompt = _prompt(g, 3, n_prompt, [5, 6, 7])
    toks = [int(t) for t in np.random.default_rng(5).integers(0, g.speech_token_size, 6 * g.chunk_tokens + 5)]
    flow = sampling.flow_noise(4, g.mel_dim, 2 * (len(toks) + n_prompt))
    probe = HopStream(g, prompt, flow)
    budget = (2 * n_prompt + 3 * 2 * g.chunk_tokens) * probe.bytes_per_frame
    hops = HopStream(g, prompt, flow, cache_budget=budget)
    pieces, cached = [], []
    for t in toks:
        pieces.append(hops.push([t]))
        cached.append(hops.cache_bytes)
    pieces.append(hops.finish())
    assert hops.rerun and hops.cache_bytes == 0 and 0 < max(cached) <= budget
    whole = g.audio(g.mel(prompt, toks, flow, chunk=g.static_chunk))
    np.testing.assert_allclose(np.concatenate(pieces), whole, rtol=0, atol=STREAM_TOLERANCE)


def test_hift_window_with_carried_phase_equals_the_whole(cosyvoice3_artifacts: Path) -> None:
    """HopStream's HiFT window (generate.hift_context) seeded with the whole run's running phase: the same
    samples from the window's first frame to emit on, and the same running phase (ONNX Runtime sums it in
    float32 in order, so the carry continues the whole run's sum). The tiny f0 stays below the voiced
    threshold, so its sines never sound: the phase output is what shows the carry (a wrong one is checked
    to differ)."""
    from ttscore.runtime.families.cosyvoice3.generate import CosyVoice3Graphs, hift_context

    g = CosyVoice3Graphs(cosyvoice3_artifacts)
    f0_frames, window = hift_context(g.sizes["hift"])
    spm, h = g.samples_per_mel, g.harmonics + 1
    mel = np.random.default_rng(8).standard_normal((g.mel_dim, 220)).astype(np.float32) * 2 - 3
    whole, phase = g._hift(mel, 0, np.zeros(h, np.float32), 0)
    for first in (60, 160):
        start = first - window
        carried = phase[start + f0_frames - 1]
        pcm, got = g._hift(mel[:, start:], start, carried, f0_frames)
        np.testing.assert_allclose(pcm[window * spm:], whole[first * spm:], rtol=0, atol=STREAM_TOLERANCE)
        np.testing.assert_allclose(got[f0_frames:], phase[start + f0_frames:], rtol=1e-6, atol=0)
        _, wrong = g._hift(mel[:, start:], start, carried + 0.01, f0_frames)
        assert np.abs(wrong[f0_frames:] - phase[start + f0_frames:]).min() > 1e-3
