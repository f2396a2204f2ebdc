"""CosyVoice3 under the shared engine (ttscore.runtime.engine.Generator): a FamilyModel whose frames are
speech tokens (one per 40 ms) and whose vocoder is the flow + HiFT hop stream.

- `admit`: `ref_text` and a reference (`ref_audio` samples or an uploaded voice's `clip` features)
  required (InvalidRequest naming the missing one); vLLM-Omni's adapter rules: `<|endofprompt|>` prefixed
  with "You are a helpful assistant." when `ref_text` lacks it; min tokens = 2 x the text's tokens, max =
  min(2048, 20 x), `max_new_tokens` (1..4096) replacing the max (and capping the min); `seed` -> the RAS
  and flow noise (sampling.py). The clip's features come from the front-end (frontend.py) unless given.
- `prefill`/`step`: the Qwen2 `lm_step` over ragged rows' K/V, RAS per row; a stop id or the length
  limit finishes the sequence with an end marker frame (-1) so the vocoder finalizes its last hop.
- The vocoder (`HopVocoder`): the engine's stream is set up from the sequence's `vocoder_prefix` (one
  object frame carrying the prompt and the flow noise: the engine decodes the prefix first and drops its
  audio); chunks of tokens then feed the stream (generate.HopStream), whose audio comes per completed
  25-token hop, the rest at the end marker. The chunk schedule follows the hops: the first chunk is the
  first hop + the look-ahead, later ones 25 tokens, so each chunk completes one hop. (A chunk event's
  `frames` counts the end marker of the last chunk; usage counts the tokens.) Streamed == whole decode under the chunk mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ttscore.contract import cosyvoice3 as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.manifest import Manifest
from ttscore.runtime.families.cosyvoice3 import sampling
from ttscore.runtime.families.cosyvoice3.checkpoint import FRONTEND_DIR
from ttscore.runtime.families.cosyvoice3.frontend import FrontEnd
from ttscore.runtime.families.cosyvoice3.generate import CosyVoice3Graphs, HopStream, Prompt
from ttscore.runtime.families.cosyvoice3.request import CosyVoice3Request
from ttscore.runtime.families.cosyvoice3.tokenizer import CosyVoice3Tokenizer
from ttscore.runtime.family import Codes, Pcm, Sequence
from ttscore.runtime.kv import KVArena
from ttscore.runtime.step_kit import ArenaModel, PromptSequence, prefill_chunks

F32 = sampling.F32
I64 = sampling.I64
END = -1  # the end marker frame


@dataclass
class Conditioning:
    prompt: Prompt
    flow_noise: F32


@dataclass
class CosyVoice3Sequence(PromptSequence):
    logits: F32 | None = None
    tokens: list[int] = field(default_factory=list)
    min_len: int = 0
    max_len: int = spec.DEFAULT_MAX_NEW_TOKENS
    ras: F32 | None = None  # [max_len, 2, rows]
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0


class HopVocoder:
    """The engine's vocoder for CosyVoice3: per stream a generate.HopStream."""

    def __init__(self, graphs: CosyVoice3Graphs) -> None:
        self.g = graphs

    def new_stream(self) -> dict[str, Any]:
        return {"hops": None}

    def decode(self, items: list[tuple[Any, Codes]]) -> list[Pcm]:
        out: list[Pcm] = []
        for stream, frames in items:
            if frames.dtype == object:  # the conditioning prefix
                cond: Conditioning = frames.reshape(-1)[0]
                stream["hops"] = HopStream(self.g, cond.prompt, cond.flow_noise)
                out.append(np.zeros(0, np.float32))
                continue
            hops: HopStream = stream["hops"]
            ids = [int(t) for t in np.asarray(frames).reshape(-1)]
            ended = END in ids
            piece = hops.push([t for t in ids if t != END])
            if ended:
                piece = np.concatenate([piece, hops.finish()])
            out.append(piece.astype(np.float32))
        return out


class CosyVoice3Model(ArenaModel):
    sequence = CosyVoice3Sequence
    drops = ("embeds", "ras", "vocoder_prefix")

    def __init__(self, artifacts: Path, manifest: Manifest, threads: int | None = None, encoders: bool = False) -> None:
        self.g = CosyVoice3Graphs(artifacts, threads)
        self.manifest = manifest
        self.sizes = self.g.sizes
        lm = self.sizes["lm"]
        self.kv = KVArena(int(lm["layers"]), int(lm["kv_heads"]), int(lm["head_dim"]))
        self.tokenizer = CosyVoice3Tokenizer(Path(artifacts) / "tokenizer")
        self.vocoder = HopVocoder(self.g)
        self.num_codebooks = 1
        self.sample_rate = self.g.sample_rate
        self.samples_per_frame = self.g.ratio * self.g.samples_per_mel
        self.front: FrontEnd | None = FrontEnd(Path(artifacts) / FRONTEND_DIR, threads) if encoders else None

    @property
    def frame_seconds(self) -> float:
        return self.samples_per_frame / self.sample_rate

    @property
    def vocoder_state_size(self) -> int:
        return 1

    def vocoder_feeds(self, frames: npt.NDArray[Any], state: F32, position: I64) -> dict[str, npt.NDArray[Any]]:
        raise NotImplementedError("CosyVoice3's vocoder runs in-process (HopVocoder)")

    def front_sessions(self, folder: Path) -> None:
        """Front-end models (campplus.onnx, speech_tokenizer_v3.onnx) from `folder` (a checkpoint, or an
        export's frontend/) for `ref_audio` requests."""
        self.front = FrontEnd(Path(folder))

    def admit(self, request: CosyVoice3Request) -> CosyVoice3Sequence:
        spec.RULES.checked_text(request.text)
        if request.ref_audio is None and request.clip is None:
            raise InvalidRequest(f"{spec.DISPLAY} requires 'ref_audio' (a reference clip) or an uploaded voice",
                                 "ref_audio")
        if not request.ref_text or not request.ref_text.strip():
            raise InvalidRequest(f"{spec.DISPLAY} requires 'ref_text', the transcript of the reference audio",
                                 "ref_text")
        mnt = request.max_new_tokens
        if mnt is not None and (isinstance(mnt, bool) or not isinstance(mnt, int) or not 1 <= mnt <= spec.MAX_NEW_TOKENS):
            raise InvalidRequest(f"'max_new_tokens' must be an integer in 1..{spec.MAX_NEW_TOKENS}", "max_new_tokens")
        seed = spec.RULES.field("seed").checked_or_drawn(request.seed)  # none: random, as vLLM-Omni
        lm = self.sizes["lm"]
        knobs = spec.RULES.request_knobs(request, {"temperature": 1.0, "top_k": lm["top_k"], "top_p": lm["top_p"]})
        clip = request.clip
        if clip is None:
            if self.front is None:
                raise InvalidRequest("this model was loaded without its front-end models (campplus, speech tokenizer)",
                                     "ref_audio")
            wav, sr = request.ref_audio  # type: ignore[misc]
            clip = self.front.features(np.asarray(wav, np.float32), int(sr))
        ref_text = spec.prompt_text(request.ref_text)
        text_ids = self.tokenizer.ids(request.text)
        ids = np.array(self.tokenizer.ids(ref_text) + text_ids, np.int64)
        min_len = max(1, spec.MIN_TOKEN_TEXT_RATIO * len(text_ids))
        max_len = min(spec.DEFAULT_MAX_NEW_TOKENS, spec.MAX_TOKEN_TEXT_RATIO * len(text_ids))
        if mnt is not None:
            max_len, min_len = mnt, min(min_len, mnt)
        prompt = Prompt(ids, clip.speech_tokens.astype(np.int64), clip.feat.astype(np.float32),
                        clip.embedding.astype(np.float32))
        rows = self.g.speech_token_size + spec.NUM_SPECIAL_SPEECH
        frames = self.g.ratio * (len(prompt.speech_tokens) + max_len)
        cond = np.empty((1, 1), object)
        cond[0, 0] = Conditioning(prompt, sampling.flow_noise(seed, self.g.mel_dim, frames))
        size = self.g.speech_token_size
        embeds = np.concatenate([self.g.speech[size + spec.SOS_OFFSET][None], np.asarray(self.g.text[ids]),
                                 self.g.speech[size + spec.TASK_ID_OFFSET][None],
                                 np.asarray(self.g.speech[prompt.speech_tokens])]).astype(np.float32)
        hop, n_prompt = self.g.chunk_tokens, len(prompt.speech_tokens)
        first = -(-n_prompt // hop) * hop - n_prompt + hop  # generate.HopStream's first hop
        return CosyVoice3Sequence(
            initial_chunk_frames=first + self.g.lookahead, chunk_frames=hop, text_tokens=len(ids),
            audio_tokens=len(prompt.speech_tokens), vocoder_prefix=cond, prompt_tokens=len(embeds), embeds=embeds,
            min_len=min_len, max_len=max_len, ras=sampling.ras_noise(seed, max_len, rows),
            temperature=float(knobs["temperature"]), top_k=int(knobs["top_k"]), top_p=float(knobs["top_p"]))

    def prefill(self, work: list[tuple[Sequence, int]]) -> None:
        done = prefill_chunks(self.kv, work, CosyVoice3Sequence, lambda s: s.prompt_tokens + s.max_len, self._lm)
        if done:
            self._sample(done)

    def step(self, batch: list[Sequence]) -> None:
        seqs = [s for s in batch if isinstance(s, CosyVoice3Sequence) and s.finished is None and s.tokens]
        if not seqs:
            return
        x = np.stack([np.asarray(self.g.speech[s.tokens[-1]], np.float32) for s in seqs])[:, None]
        self._lm(seqs, x)
        self._sample(seqs)

    def _lm(self, seqs: list[CosyVoice3Sequence], x: F32) -> None:
        """New positions x [B, T, D] after each row's past (the K/V arena's)."""
        out = self.kv.run(self.g.graphs["lm_step"], seqs, x)
        for r, s in enumerate(seqs):
            s.logits = np.asarray(out["logits"][r], np.float32)

    def _sample(self, seqs: list[CosyVoice3Sequence]) -> None:
        lm = self.sizes["lm"]
        size = self.g.speech_token_size
        for s in seqs:
            assert s.logits is not None and s.ras is not None
            i = len(s.tokens)
            w = sampling.scores(s.logits, size, allow_stop=i >= s.min_len)
            if s.temperature < spec.GREEDY_TEMPERATURE:
                tok = int(np.argmax(w))
            else:
                w = sampling.tempered(w, s.temperature)
                tok, _ = sampling.ras_pick(w, s.tokens, s.ras[i, 0], s.ras[i, 1], s.top_p, s.top_k,
                                           lm["win_size"], lm["tau_r"])
            if tok >= size:
                s.finished = "stop"
                s.pending.append(np.array([END], np.int64))
                continue
            s.tokens.append(tok)
            s.pending.append(np.array([tok], np.int64))
            s.frames_out += 1
            if s.frames_out >= s.max_len:
                s.finished = "length"
                s.pending.append(np.array([END], np.int64))
