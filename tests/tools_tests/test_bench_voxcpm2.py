"""VoxCPM2's bench package (triton_tts/bench/voxcpm2): found by the shared benches, its reference
counts the patches the reference really generated, and its bench requests carry only VoxCPM2's fields."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from triton_tts.bench import common, compare
from ttscore.contract import voxcpm2 as spec


def test_found_by_the_shared_benches() -> None:
    bench = common.bench_family(spec.FAMILY)
    assert bench.FAMILY == spec.FAMILY
    assert "real" in bench.SIZES


def test_reference_counts_the_patches_it_generated(voxcpm2_tiny: Path) -> None:
    from export.voxcpm2.reference import fed_noise

    bench = common.bench_family(spec.FAMILY)
    ref = bench.Reference(voxcpm2_tiny)
    cfg = ref.model.config

    def noise(seed: int) -> Iterator[np.ndarray]:
        rng = np.random.default_rng(seed)
        while True:
            yield rng.standard_normal((1, cfg.feat_dim, cfg.patch_size), dtype=np.float32)

    with fed_noise(noise(0)):
        made = ref.generate("Hello world, this is a test.", 3)
    with fed_noise(noise(0)):
        wav = ref.model.generate("Hello world, this is a test.", max_len=3)
    samples = wav.reshape(-1).shape[0]
    assert 1 <= made <= 3
    assert samples == made * ref.samples_per_patch


def test_triton_requests_carry_only_its_fields() -> None:
    data = compare.speech_input(spec.FAMILY, {"speaker": None}, 6)["data"]
    assert len(data) == len(compare.TEXTS)
    for row in data:
        assert row["max_new_tokens"] == [6]
        assert "speaker" not in row and "do_sample" not in row
