"""What the families' gateway adapter tests share (tests/gateway_tests/test_gateway_<family>.py): a deployment
of one checkpoint from its manifest fields, the plan of a request's fields and the 400 a refused request gets,
the stream matrix every family serves (and the test of it), and the rows of a refusal matrix: other families'
fields and the checks most families share."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.checkpoints import from_manifest
from gateway.errors import APIError
from gateway.planning import Deployment, NoStoredVoices, SpeechFields, plan_speech
from gateway.settings import CheckpointSettings
from ttscore.contract.manifest import Manifest

# (stream_format, response_format): every stream a family serves.
STREAMS = [("sse", "pcm"), ("sse", "wav"), ("audio", "pcm"), ("audio", "wav")]
# Other families' fields as (fields, refused param) rows: voice design and language, then Qwen3-TTS's modes.
# Qwen3-TTS's and OpenAI's preset voice names, which a family without them refuses.
FOREIGN_VOICES = [({"voice": "vivian"}, "voice"), ({"voice": "alloy"}, "voice")]
# A compressed format on the raw audio stream, speed on a stream (time-stretch needs the whole clip).
STREAM_LIMITS = [
    ({"stream_format": "audio", "response_format": "flac"}, "response_format"),
    ({"stream_format": "sse", "speed": 1.5}, "speed"),
]
# max_new_tokens outside 1..4096 and a negative seed.
TOKEN_AND_SEED_BOUNDS = [({"max_new_tokens": 0}, "max_new_tokens"), ({"max_new_tokens": 4097}, "max_new_tokens"),
                         ({"seed": -1}, "seed")]
STYLE_FIELDS = [({"instructions": "calm"}, "instructions"), ({"language": "English"}, "language")]
QWEN_MODE_FIELDS = [
    ({"task_type": "Base"}, "task_type"),
    ({"x_vector_only_mode": False}, "x_vector_only_mode"),
    ({"non_streaming_mode": True}, "non_streaming_mode"),
    ({"initial_codec_chunk_frames": 4}, "initial_codec_chunk_frames"),
]


def streams_test(plan: Callable[..., Any]) -> Any:
    """The test that a family serves every stream in STREAMS, for its module's `plan(dep, **fields)` (assigned
    to `test_streams` there; it takes the module's `dep` fixture)."""

    @pytest.mark.parametrize(("stream", "fmt"), STREAMS)
    def test_streams(dep: Deployment, stream: str, fmt: str) -> None:
        assert plan(dep, stream_format=stream, response_format=fmt).output.stream == stream

    return test_streams


def one_checkpoint(tmp_path: Path, name: str, manifest: dict[str, Any], encoder: str | None = None,
                   voices: NoStoredVoices | None = None) -> Deployment:
    """A deployment serving one checkpoint `name` (variant base, Triton model speech_generation_<name>, its
    clip encoder `encoder`) whose manifest has `manifest`'s fields, with `voices` (none by default)."""
    raw = {"format_version": 1, "variant": "base", **manifest}
    settings = CheckpointSettings(name, "base", f"speech_generation_{name}", tmp_path, encoder)
    return Deployment([from_manifest(settings, Manifest.parse(tmp_path, raw))], voices or NoStoredVoices())


def plan_for(dep: Deployment, model: str, **fields: Any) -> Any:
    """The plan of a request for `model` with `fields` (input "Hello." unless given)."""
    return plan_speech(SpeechFields(model=model, input=fields.pop("input", "Hello."), **fields), dep)


def refusal(make_plan: Callable[[], Any]) -> APIError:
    """The 400 that planning a request raises."""
    with pytest.raises(APIError) as info:
        make_plan()
    assert info.value.status == 400, info.value.message
    return info.value


def assert_no_language_listed(dep: Deployment, fails: Callable[..., APIError]) -> None:
    """A family refusing `language`, "Auto" included (a 400 naming it), lists no language on /v1/models."""
    assert dep.checkpoints[0].languages == ()
    assert fails(dep, language="Auto").param == "language"


class EncoderEnv:
    """What an adapter's `reference_features` is given, with a backend whose every call returns `outputs` (or
    raises it, an exception) and is recorded in `backend.calls` (model, inputs); a reference clip is 0.5 s of
    silence at 16 kHz, fetched only with the family's own bounds `ref_bounds`."""

    def __init__(self, outputs: dict[str, Any] | Exception, ref_bounds: Any) -> None:
        self.backend = self
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.request_id = "r"
        self._outputs, self._bounds = outputs, ref_bounds

    async def infer(self, model: str, inputs: dict[str, Any], request_id: str) -> dict[str, Any]:
        self.calls.append((model, inputs))
        if isinstance(self._outputs, Exception):
            raise self._outputs
        return self._outputs

    async def ref_audio(self, locator: str, bounds: Any) -> tuple[Any, int]:
        import numpy as np

        assert bounds == self._bounds
        return np.zeros(8000, np.float32), 16000

    async def shared(self, key: tuple[Any, ...], compute: Any) -> Any:
        return await compute()
