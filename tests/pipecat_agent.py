"""A pipecat pipeline against the gateway's ElevenLabs dialect, run in .venv-pipecat (pipecat-ai's own environment;
tests/e2e_tests/test_e2e_pipecat.py runs it as a subprocess and reads the JSON it prints last).

    .venv-pipecat/bin/python tests/pipecat_agent.py --service ws|http --url http://127.0.0.1:PORT --key KEY
        --voice vivian --model MODEL

The service is pipecat's own (ElevenLabsTTSService over multi-stream-input, or ElevenLabsHttpTTSService over
stream/with-timestamps), unchanged, pointed at the gateway. The pipeline is source -> TTS -> a sink that records
every frame. Turns: one utterance spoken to its end; a long one interrupted (an InterruptionFrame, as a user's
barge-in) after its first audio; then the next utterance. Prints what arrived: audio bytes per context, word
timestamps, errors, and the audio of the interrupted context that still reached the sink after the interruption
did (where an output transport stops playing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import aiohttp
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InterruptionFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

RATE = 24000
FIRST = "Hello from pipecat."
LONG = ("This answer is long, and the user interrupts it before it ends, because the bot talks far too much about "
        "nothing at all.")
NEXT = "The next utterance."


class Sink(FrameProcessor):
    def __init__(self) -> None:
        super().__init__()
        self.audio: dict[str, int] = {}
        self.words: list[tuple[str, float | None]] = []
        self.errors: list[str] = []
        self.started: list[str] = []
        self.stopped: list[str] = []
        self.interrupted_at: float | None = None
        self.interrupted_context: str | None = None
        self.after_interruption = 0
        self.changed = asyncio.Condition()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        ctx = str(getattr(frame, "context_id", None))
        if isinstance(frame, InterruptionFrame):
            self.interrupted_at = time.monotonic()  # here, where a transport would stop playing
        elif isinstance(frame, TTSAudioRawFrame):
            self.audio[ctx] = self.audio.get(ctx, 0) + len(frame.audio)
            if self.interrupted_at is not None and ctx == self.interrupted_context:
                self.after_interruption += len(frame.audio)
        elif isinstance(frame, TTSTextFrame):
            self.words.append((frame.text, getattr(frame, "pts", None)))
        elif isinstance(frame, TTSStartedFrame):
            self.started.append(ctx)
        elif isinstance(frame, TTSStoppedFrame):
            self.stopped.append(ctx)
        elif isinstance(frame, ErrorFrame):
            self.errors.append(str(frame.error))
        async with self.changed:
            self.changed.notify_all()
        await self.push_frame(frame, direction)

    async def wait(self, check: Any, timeout: float) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(check), timeout)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from pipecat.services.elevenlabs.tts import ElevenLabsHttpTTSService, ElevenLabsTTSService

    session = aiohttp.ClientSession()
    if args.service == "ws":
        tts: Any = ElevenLabsTTSService(api_key=args.key, url=args.url.replace("http", "ws", 1),
                                        settings=ElevenLabsTTSService.Settings(voice=args.voice, model=args.model))
    else:
        tts = ElevenLabsHttpTTSService(api_key=args.key, base_url=args.url, aiohttp_session=session,
                                       settings=ElevenLabsHttpTTSService.Settings(voice=args.voice, model=args.model))
    sink = Sink()
    worker = PipelineWorker(Pipeline([tts, sink]), cancel_on_idle_timeout=False,
                            params=PipelineParams(audio_out_sample_rate=RATE))
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(worker: Any, frame: Any) -> None:
        started.set()

    result: dict[str, Any] = {}

    async def drive() -> None:
        try:
            await asyncio.wait_for(started.wait(), 60)
            await worker.queue_frame(TTSSpeakFrame(FIRST))
            await sink.wait(lambda: len(sink.stopped) >= 1, args.timeout)
            first = sink.stopped[0]
            await worker.queue_frame(TTSSpeakFrame(LONG))
            await sink.wait(lambda: any(c not in (first,) and n > 0 for c, n in sink.audio.items()), args.timeout)
            long_ctx = next(c for c, n in sink.audio.items() if c != first and n > 0)
            sink.interrupted_context = long_ctx
            before = sink.audio[long_ctx]
            await worker.queue_frame(InterruptionFrame())
            await asyncio.sleep(1.0)
            await worker.queue_frame(TTSSpeakFrame(NEXT))
            await sink.wait(lambda: any(c not in (first, long_ctx) for c in sink.stopped), args.timeout)
            next_ctx = next(c for c in sink.stopped if c not in (first, long_ctx))
            result.update(first_bytes=sink.audio.get(first, 0), interrupted_bytes_before=before,
                          interrupted_bytes_after=sink.after_interruption, next_bytes=sink.audio.get(next_ctx, 0),
                          words=sink.words, errors=sink.errors, contexts=[first, long_ctx, next_ctx])
        except Exception as exc:  # reported, the pipeline still ends
            result.update(failure=f"{type(exc).__name__}: {exc}", audio=sink.audio, errors=sink.errors,
                          stopped=sink.stopped)
        finally:
            await worker.queue_frame(EndFrame())

    runner = WorkerRunner()
    await runner.add_workers(worker)
    await asyncio.gather(runner.run(), drive())
    await session.close()
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--service", choices=["ws", "http"], required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--voice", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    print(json.dumps(asyncio.run(main(parser.parse_args()))), flush=True)
