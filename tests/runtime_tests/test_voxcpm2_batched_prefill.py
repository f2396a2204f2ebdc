"""VoxCPM2 batched prefill (ttscore/runtime/families/voxcpm2/model.py `prefill`): the chunks the
engine admits in one iteration go through each graph in one call (left-padded, each row after its
own past), and every request's audio equals its audio alone (the parity suite's batched tolerance,
1e-5), also when prompts are cut into chunks by a small prefill budget (ragged pasts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ttscore.runtime.engine import Generator
from ttscore.runtime.families import load_model
from ttscore.runtime.families.voxcpm2.model import VoxCPM2Model
from ttscore.runtime.families.voxcpm2.request import VoxCPM2Request

TEXTS = ("Hello world, this is a test.", "Short one.", "A somewhat longer sentence for the fourth request here.",
         "Streaming speech arrives.")


@pytest.fixture(scope="module")
def model(voxcpm2_artifacts: Path) -> VoxCPM2Model:
    m = load_model(voxcpm2_artifacts)
    assert isinstance(m, VoxCPM2Model)
    return m


def requests(model: VoxCPM2Model) -> dict[str, VoxCPM2Request]:
    rng = np.random.default_rng(0)
    p, d = model.info.patch_size, model.info.feat_dim
    reqs = {f"r{i}": VoxCPM2Request(t, seed=30 + i, max_new_tokens=8) for i, t in enumerate(TEXTS)}
    reqs["r1"].ref_patches = rng.standard_normal((3, p, d)).astype(np.float32) * 0.5  # a cloning prompt
    return reqs


def alone(model: VoxCPM2Model, req: VoxCPM2Request) -> np.ndarray:
    return np.concatenate([e.pcm for e in Generator(model, max_batch=1, chunk_policy="fixed").synthesize(req)])


class Calls:
    """Counts each graph's calls (and the batch of each base LM call)."""

    def __init__(self, model: VoxCPM2Model, monkeypatch: pytest.MonkeyPatch) -> None:
        self.base_batches: list[int] = []
        real = model.base_lm.run_bound

        def run(feeds: dict[str, Any]) -> Any:
            self.base_batches.append(int(feeds["inputs_embeds"].shape[0]))
            return real(feeds)

        monkeypatch.setattr(model.base_lm, "run_bound", run)


@pytest.mark.parametrize("budget", [4096, 20])  # 20: prompts of 15, 14, 41, 8 split across iterations (ragged pasts)
def test_batched_prefill_equals_alone(model: VoxCPM2Model, monkeypatch: pytest.MonkeyPatch, budget: int) -> None:
    reqs = requests(model)
    want = {k: alone(model, r) for k, r in reqs.items()}
    calls = Calls(model, monkeypatch)
    gen = Generator(model, max_batch=4, chunk_policy="fixed", prefill_budget=budget)
    for k, r in requests(model).items():
        gen.submit(k, r)
    pcm: dict[str, list[np.ndarray]] = {k: [] for k in reqs}
    first_prefill = None
    while gen.num_active:
        for ev in gen.step():
            pcm[ev.req_id].append(ev.pcm)
        if first_prefill is None:
            first_prefill = list(calls.base_batches)
    for k in reqs:
        got = np.concatenate(pcm[k])
        assert got.shape == want[k].shape, k
        assert float(np.abs(got - want[k]).max()) <= 1e-5, k
    assert first_prefill is not None
    if budget == 4096:
        # The whole of the first iteration's prefill was one base LM call over all four prompts
        # (then one decode call over the four): no request's prefill waited for another's.
        assert first_prefill == [4, 4]


def test_a_single_chunk_runs_unpadded(model: VoxCPM2Model, monkeypatch: pytest.MonkeyPatch) -> None:
    """One request alone: its prefill feeds are exactly its own prompt (no padding), so its audio is
    what it was before batching existed (bit-identical across runs, as test_voxcpm2_parity checks)."""
    seen: list[tuple[int, ...]] = []
    real = model.base_lm.run_bound

    def run(feeds: dict[str, Any]) -> Any:
        seen.append(tuple(feeds["inputs_embeds"].shape))
        assert int(feeds["attention_mask"].min()) == 1
        return real(feeds)

    monkeypatch.setattr(model.base_lm, "run_bound", run)
    req = VoxCPM2Request(TEXTS[0], seed=1, max_new_tokens=3)
    alone(model, req)
    prompt = model.admit(VoxCPM2Request(TEXTS[0], seed=1)).prompt_tokens
    assert seen[0] == (1, prompt, model.info.lm.hidden_size)


def test_a_request_without_a_seed_is_seeded_42_as_vllm_omni_deploys_it(model: VoxCPM2Model) -> None:
    """vLLM-Omni 0.30.0's deploy file pins seed 42 for VoxCPM2: no seed draws the same noise as seed 42, and
    the same request twice gives the same audio; another seed draws other noise."""
    from ttscore.contract import voxcpm2 as spec

    assert spec.DEFAULT_SEED == 42 and not spec.RULES.draws_seed  # the gateway draws none: the default holds

    def noise(seed: int | None) -> np.ndarray:
        return model.admit(VoxCPM2Request(text="Hello there.", seed=seed)).rng.standard_normal(8)

    np.testing.assert_array_equal(noise(None), noise(42))
    np.testing.assert_array_equal(noise(None), noise(None))
    assert not np.array_equal(noise(None), noise(7))
    a = alone(model, VoxCPM2Request(text="Hello there.", max_new_tokens=3))
    np.testing.assert_array_equal(a, alone(model, VoxCPM2Request(text="Hello there.", max_new_tokens=3)))
