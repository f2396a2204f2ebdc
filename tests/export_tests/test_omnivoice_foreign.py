"""An OmniVoice checkpoint the project did not make: built with the reference's own classes and
init (OmniVoiceConfig + transformers' Qwen3Config, OmniVoice(config).save_pretrained), dimensions
and a tokenizer unlike make-tiny's (special tokens first, another vocabulary), and a codec of other
dimensions with torch's and transformers' default init (its encoder side too). It exports, and the
runtime's codes equal the reference's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from omnivoice_fixtures import *  # noqa: F403  (its session fixtures: omnivoice_foreign, omnivoice_foreign_artifacts)

from ttscore.contract import omnivoice as spec

pytestmark = [pytest.mark.export, pytest.mark.parity, pytest.mark.slow]


def test_foreign_checkpoint_exports_and_matches_the_reference(omnivoice_foreign: Path,
                                                              omnivoice_foreign_artifacts: Path) -> None:
    import torch

    from export.omnivoice.reference import load_reference, omnivoice_module
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families import load_model
    from ttscore.runtime.families.omnivoice.request import OmniVoiceRequest

    ours = load_model(omnivoice_foreign_artifacts)
    assert ours.info.hidden_size == 48 and ours.info.num_layers == 3
    ref = load_reference(omnivoice_foreign)
    mod = omnivoice_module()
    text, instruct = "pack my box, judge my vow.", "elderly, high pitch"
    config = mod.OmniVoiceGenerationConfig(num_step=6, position_temperature=0.0, class_temperature=0.0)
    with torch.no_grad():
        want = ref._generate_iterative(ref._preprocess_all(text=[text], instruct=[instruct]), config)[0].numpy()
    (ev,) = list(Generator(ours).synthesize(OmniVoiceRequest(text=text, instructions=instruct, num_step=6,
                                                             position_temperature=0.0, class_temperature=0.0)))
    assert ev.codes is not None
    assert len(np.unique(want)) > 20  # not a degenerate utterance
    np.testing.assert_array_equal(ev.codes.T, want)
    with torch.no_grad():
        audio: Any = ref.audio_tokenizer.decode(torch.from_numpy(want)[None]).audio_values[0, 0].numpy()
    assert np.abs(ev.pcm - audio).max() <= 1e-4 * np.abs(audio).max()


def test_foreign_codec_encoder_equals_the_transformers_5_tokenizer(omnivoice_foreign: Path,
                                                                   omnivoice_foreign_artifacts: Path) -> None:
    """The foreign audio tokenizer loads strictly in HiggsAudioV2TokenizerModel (transformers 5.14), and
    the exported codec_encoder's codes equal its encode, raw clips and a preprocessed reference clip."""
    from test_omnivoice_clone import ref5_codes, speechy

    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.families.omnivoice.clone import ReferenceEncoder, preprocess

    manifest = read_manifest(omnivoice_foreign_artifacts)
    assert manifest.graphs[spec.CODEC_ENCODER.name]["validation"]["mismatched_codes"] == {"codes": 0}
    enc = ReferenceEncoder(omnivoice_foreign_artifacts, manifest, None)
    assert enc.graph is not None
    clips = [speechy(n * spec.HOP / spec.SAMPLE_RATE, spec.SAMPLE_RATE, 40 + n) for n in (3, 33)]
    clip = speechy(2.0, 16000, 9)
    clips.append(preprocess(clip, 16000))
    want = ref5_codes(omnivoice_foreign / "audio_tokenizer", clips)
    for c, w in zip(clips[:2], want[:2], strict=True):
        np.testing.assert_array_equal(enc.graph.run({"audio": c})["codes"], w)
    np.testing.assert_array_equal(enc.codes(clip, 16000), want[2])
