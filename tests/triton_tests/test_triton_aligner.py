"""forced_aligner in the REAL tritonserver 2.51 over the export of a checkpoint the project did not make
(tests/aligner_foreign.py): a 24 kHz clip and a text in, and the words, times and spans that qwen-asr 0.0.6 gives
for the same clip and text out (its own resampling to 16 kHz included); a bad request gets INVALID_ARG naming the
field and the server keeps answering."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from aligner_fixtures import *  # noqa: F403  (aligner_foreign, aligner_foreign_artifacts)
from aligner_fixtures import reference
from grpc_inputs import to_inputs
from tritonclient.utils import InferenceServerException

from ttscore.contract import tensors as triton_io

pytestmark = [pytest.mark.integration]

RATE = 24000
CASES = (("Hello, world! It's 3 o'clock.", "English"), ("今天天气很好，我们去公园散步吧。", "Chinese"),
         ("今日はいい天気ですね。", "Japanese"))


def _inputs(audio: np.ndarray, text: str, language: str, rate: int = RATE) -> list[grpcclient.InferInput]:
    return to_inputs({"audio": audio.astype(np.float32), "sample_rate": np.array([rate], np.int32),
                      "text": np.array([text.encode()], dtype=np.object_),
                      "language": np.array([language.encode()], dtype=np.object_)})


def test_served_words_are_the_references(triton_server, aligner_foreign: Path,
                                         aligner_foreign_artifacts: Path) -> None:
    server = triton_server(models=["forced_aligner"], artifacts_dir=aligner_foreign_artifacts)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    ref = reference(aligner_foreign)
    rng = np.random.default_rng(11)
    try:
        for text, language in CASES:
            clip = (rng.standard_normal(int(2.2 * RATE)) * 0.1).astype(np.float32)
            result = client.infer("forced_aligner", _inputs(clip, text, language))
            got = list(zip([t.decode() for t in result.as_numpy("word_text")],
                           result.as_numpy("word_start").tolist(), result.as_numpy("word_end").tolist(),
                           strict=True))
            want = [(w.text, w.start_time, w.end_time)
                    for w in ref.align(audio=(clip, RATE), text=text, language=language)[0]]
            assert [g[0] for g in got] == [w[0] for w in want]
            # float32 on the wire: the reference's seconds rounded to float32
            assert [g[1:] for g in got] == [tuple(float(np.float32(v)) for v in w[1:]) for w in want]
            starts, ends = result.as_numpy("char_start"), result.as_numpy("char_end")
            assert all(0 <= a < b <= len(text) for a, b in zip(starts, ends, strict=True))
        for inputs, field in ((_inputs(np.full(100, np.nan), "a b", "English"), "audio"),
                              (_inputs(np.zeros(3200), "a b", "English", rate=0), "sample_rate")):
            with pytest.raises(InferenceServerException) as err:
                client.infer("forced_aligner", inputs)
            wire = triton_io.parse_error(err.value.message())
            assert (wire.code, wire.param) == ("INVALID_ARG", field), err.value.message()
        again = client.infer("forced_aligner", _inputs(np.zeros(8000), "still here", "English", rate=16000))
        assert [t.decode() for t in again.as_numpy("word_text")] == ["still", "here"]
    finally:
        client.close()
