"""The gateway's family seams (issue 18): one adapter per contract family, limits from each family's rules."""

from __future__ import annotations

import numpy as np
import pytest

from gateway import protocol, refaudio
from gateway.families import ADAPTERS, adapter
from gateway.family import FamilyAdapter
from ttscore.contract import families
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.rules import RefAudioBounds
from ttscore.runtime.audio import check_reference

pytestmark = pytest.mark.unit


def test_every_contract_family_has_one_gateway_adapter_with_its_rules():
    assert set(ADAPTERS) == set(families.RULES)
    for family, a in ADAPTERS.items():
        assert a.family == family and a.rules is families.RULES[family]
        for name in FamilyAdapter.__annotations__:  # the protocol's data members
            assert hasattr(a, name), (family, name)
    with pytest.raises(KeyError, match="no gateway adapter"):
        adapter("no-such-family")


def test_the_request_schema_takes_the_widest_range_of_the_families():
    fields = protocol.SpeechRequest.model_fields
    for name in ("max_new_tokens", "initial_codec_chunk_frames", "seed"):
        lo, hi = families.field_range(name)
        assert lo == min(r.field(name).lo for r in families.RULES.values() if r.has_field(name))
        assert hi == max(r.field(name).hi for r in families.RULES.values() if r.has_field(name))
        bounds = {type(m).__name__: m for m in fields[name].metadata}
        assert (bounds["Ge"].ge, bounds["Le"].le) == (lo, hi), name


def test_reference_audio_bounds_are_the_familys():
    narrow = RefAudioBounds(min_rate=16000, max_rate=16000, min_seconds=0.5, max_seconds=1.0)
    assert narrow.widest(RefAudioBounds()) == RefAudioBounds()
    wav = np.zeros(16000, np.float32)
    assert check_reference(wav, 16000, bounds=narrow).size == 16000
    with pytest.raises(InvalidRequest, match=r"sample rate must be in \[16000, 16000\]"):
        check_reference(np.zeros(8000, np.float32), 8000, bounds=narrow)
    with pytest.raises(InvalidRequest, match="must last 0.5-1 s"):
        check_reference(np.zeros(32000, np.float32), 16000, bounds=narrow)
    assert families.ref_audio_bounds() == refaudio.BOUNDS  # without a family: the widest of them

