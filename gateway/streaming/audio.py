"""One TTS request of a WebSocket session, as audio frames sent as they come: a sentence (whole clip, or
streamed when the config asks for it) or an utterance's incremental generation (always streamed: the
point is early audio; more text reaches it by extension while it runs)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ttscore.contract.tensors import FINISH_ERROR, FINISH_STOP

from ..family import SpeechPlan
from ..metrics import RequestTrace
from ..services import AudioStream, SpeechService, StreamAborted
from ..word_timing import GrowingText, Word
from .messages import SessionSetup

SendAudio = Callable[[bytes], Awaitable[None]]
SendWords = Callable[[tuple[Word, ...]], Awaitable[None]]


@dataclass
class OpenText:
    """The running generation of an utterance in incremental mode."""

    key: str  # the Triton text key of the generation
    plan: SpeechPlan
    rid: str
    chars: int  # characters sent so far
    said: GrowingText = field(default_factory=GrowingText)  # the text the generation took so far (its words index it)
    stop: asyncio.Event = field(default_factory=asyncio.Event)  # set: cancel it (the utterance is cancelled)
    task: asyncio.Future[None] | None = None


@dataclass
class Heard:
    """Seconds of audio one request sent, also when it failed part-way (the timeline of the next sentence's words)."""

    seconds: float = 0.0


async def generate(service: SpeechService, setup: SessionSetup, text: str, rid: str, trace: RequestTrace,
                   send: SendAudio, open_text: OpenText | None = None, send_words: SendWords | None = None,
                   heard: Heard | None = None) -> str:
    """Generate `text` (or run `open_text`'s generation) and `send` its audio as it comes; returns why the
    generation ended ("stop" or "length"; a failure raises). With word timestamps, `send_words` gets the words after
    their audio (times from this request's first sample; char offsets into `text`, or into an incremental
    generation's whole text, `open_text.said`); `heard` how much audio went out."""
    heard = heard if heard is not None else Heard()
    if open_text is not None:
        return await _send_stream(await service.open_stream(open_text.plan, rid, setup.features, trace=trace,
                                                            text_key=open_text.key, said=open_text.said), send,
                                  send_words, heard)
    plan = service.plan(setup.message.speech_fields(text))
    if plan.output.stream is not None:
        return await _send_stream(await service.open_stream(plan, rid, setup.features, trace=trace), send,
                                  send_words, heard)
    clip = await service.synthesize(plan, rid, setup.features, trace=trace)
    await send(clip.audio)
    heard.seconds = clip.seconds
    if clip.words is not None and send_words is not None:
        await send_words(clip.words)
    return clip.finish_reason


async def _send_stream(stream: AudioStream, send: SendAudio, send_words: SendWords | None, heard: Heard) -> str:
    stream.on_words = send_words
    try:
        async for data in stream.body():
            await send(data)
            heard.seconds = stream.seconds
    finally:
        await stream.aclose()
    if stream.finish_reason == FINISH_ERROR:  # told in-band by the stream's body (raw frames: it raised)
        raise StreamAborted("the stream failed")
    return stream.finish_reason or FINISH_STOP


__all__ = ["Heard", "OpenText", "SendAudio", "SendWords", "generate"]
