"""MOSS-TTS-Nano over its exported graphs under the shared engine (ttscore.runtime.family), registered as the family
`moss_tts_nano` and served by speech_generation.

A request's life: `admit` (validate; the reference clip's codec codes given (`ref_audio_tokens`, on the served path
from the checkpoint's moss_codec_encoder Triton model) or, offline only (`encoders`), a 48 kHz clip encoded here;
the text cut into chunks as vLLM-Omni does (text.py); the request's own generator from its seed) -> `prefill`
(the chunk's voice-clone prompt rows embedded from the tables, `global_step` over them through the K/V arena; the
call that completes it makes the chunk's first frame) -> `step` (each sequence's last frame `[slot, c_0..c_15]`
embedded, `global_step` one position further for every sequence in one batched call) -> `release`.

A frame (`_frames`, every row of the batch in lockstep): the global hidden state and the slot's embedding (two
positions of `local_step` from an empty past) give the stop/continue logits and codebook 0's; a row that does not
continue ends its text chunk; each code drawn feeds its embedding for the next codebook's logits (`local_code_step`
over the frame's fixed-size local cache, each position's K/V written into it in place). Sampling (sampling.py) takes one uniform per draw from the request's generator, the decision's
first, then the codes', so a request's frames do not depend on what it was batched with.

A text of several chunks: when a chunk ends (its stop, or `max_new_tokens` frames), the next chunk's prompt is
prefilled from an empty past (the sequence's arena row released, its `prefilled` reset, so the engine prefills it
again) with a fresh repetition history, and the engine is told (`Sequence.breaks`) to end the vocoder stream
after the chunk's last frame, add the pause and start a new stream, as vLLM-Omni's remote code decodes each chunk on
its own. The vocoder is `moss_codec_decoder`, exact streaming (mono by the mean of the codec's two channels), its
windows kept in this process's state arena and updated in place (ttscore.runtime.vocoder.ArenaVocoder).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ttscore.contract import kv as kv_names
from ttscore.contract.errors import ArtifactError, InvalidRequest
from ttscore.contract.manifest import Manifest
from ttscore.contract.moss_tts_nano import codec, rules
from ttscore.contract.moss_tts_nano import graphs as spec
from ttscore.contract.tensors import code_grid
from ttscore.runtime.families.moss_tts_nano import sampling
from ttscore.runtime.families.moss_tts_nano import text as chunking
from ttscore.runtime.families.moss_tts_nano.checkpoint import CONFIG, MossConfig, parse_config
from ttscore.runtime.families.moss_tts_nano.request import (
    MossRequest,
    Sampling,
    checked_text,
    resolve_limits,
    resolve_sampling,
)
from ttscore.runtime.families.moss_tts_nano.tokenizer import (
    TOKENIZER_FILE,
    MossTokenizer,
    voice_clone_rows,
    voice_prefix_length,
)
from ttscore.runtime.family import Sequence
from ttscore.runtime.kv import GrowingPast, KVArena
from ttscore.runtime.onnx import OnnxGraph, open_graph, open_table
from ttscore.runtime.step_kit import ArenaModel, FrameSequence, prefill_chunks, step_frames
from ttscore.runtime.vocoder import ArenaVocoder

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
DEFAULT_INITIAL_CHUNK_FRAMES = 2  # 160 ms before the first audio
DEFAULT_CHUNK_FRAMES = 12
# Reference frames per moss_codec_encoder call (2 s at 48 kHz): bounds the encoder's activations and state copies.
ENCODE_CHUNK_FRAMES = 25
# Voice prefixes (the prompt rows before the text: template, reference rows, header) whose global K/V are kept, the
# least recently used dropped first (real size: ~4.4 MB for a 2 s reference)
PREFIX_CACHE_VOICES = 16


def encoder_state_size(manifest: Manifest) -> int:
    """The reference encoder's state size (the manifest's codec section)."""
    size = dict(manifest.raw.get(codec.MANIFEST_FIELD) or {}).get("encoder_state_size")
    if not isinstance(size, int) or size < 0:
        raise ArtifactError(f"{manifest.path}/manifest.json has no {codec.MANIFEST_FIELD}.encoder_state_size: "
                            "re-export")
    return size


def encode_reference(encoder: OnnxGraph, state_size: int, audio: npt.NDArray[Any], rate: int,
                     samples_per_frame: int = spec.SAMPLES_PER_FRAME,
                     chunk_frames: int = ENCODE_CHUNK_FRAMES) -> I64:
    """A mono reference clip at `rate` -> its codes [frames, 16], as upstream prepares it: resampled to 48 kHz as
    torchaudio.functional.resample does (ttscore.runtime.sinc_resample), the trailing partial frame dropped (it
    gives no code), moss_codec_encoder from a zero state (which repeats the clip to the codec's two channels) run
    over `chunk_frames` frames at a time, each call given the last one's `new_state` and the frames done as its
    `position` (the graph is exact across chunks), so memory stays bounded by the chunk, not the clip. The one
    rule of the served moss_codec_encoder and offline cloning; InvalidRequest naming `ref_audio` for a clip
    outside the family's bounds (rate, length, finite samples) or shorter than a frame."""
    from ttscore.runtime import sinc_resample
    from ttscore.runtime.audio import check_reference

    if chunk_frames < 1:
        raise ValueError(f"chunk_frames must be >= 1, not {chunk_frames}")
    x = check_reference(audio, int(rate), bounds=rules.REF_AUDIO)
    if int(rate) != spec.SAMPLE_RATE:
        x = sinc_resample.resample(x, int(rate), spec.SAMPLE_RATE)
    frames = len(x) // samples_per_frame
    if frames == 0:
        raise InvalidRequest(f"the reference clip is shorter than one frame ({samples_per_frame} samples at "
                             f"{spec.SAMPLE_RATE} Hz)", "ref_audio")
    state = np.zeros((1, state_size), np.float32)
    parts: list[I64] = []
    for start in range(0, frames, chunk_frames):
        stop = min(frames, start + chunk_frames)
        out = encoder.run({"audio": np.ascontiguousarray(x[None, start * samples_per_frame: stop * samples_per_frame],
                                                         np.float32),
                           "state": state, "position": np.full(1, start, np.int64)})
        parts.append(np.asarray(out["codes"][0], np.int64))
        state = np.ascontiguousarray(out["new_state"], np.float32)
    return np.concatenate(parts, axis=0)


@dataclass
class MossSequence(FrameSequence):
    chunks: list[str] = field(default_factory=list)  # the text chunks (text.py)
    chunk: int = 0  # the one being generated
    ref_codes: I64 = field(default_factory=lambda: np.zeros((0, spec.N_VQ), np.int64))
    sampling: Sampling | None = None
    max_frames: int = rules.DEFAULT_MAX_NEW_TOKENS  # per text chunk
    chunk_frames_made: int = 0
    # The codes each codebook drew in this text chunk (the repetition penalty's history), [N_VQ, codebook size].
    seen: npt.NDArray[np.bool_] | None = None
    hidden: F32 | None = None  # the global stack's last hidden state [D]
    rng: np.random.Generator | None = None
    reason: str = "stop"  # why the last chunk ended
    prefix_tokens: int = 0  # this chunk's prompt rows before its text (the voice prefix: MossModel.prefixes)
    prefix_key: bytes = b""  # their digest

    def uniform(self) -> float:
        assert self.rng is not None
        return float(self.rng.random())

    def uniforms(self, n: int) -> npt.NDArray[np.float64]:
        """The next `n` draws at once (the same values as `n` calls of `uniform`)."""
        assert self.rng is not None
        return self.rng.random(n)


class MossModel(ArenaModel):
    """FamilyModel for an exported MOSS-TTS-Nano checkpoint (ttscore.runtime.family)."""

    sequence = MossSequence
    drops = ("embeds", "seen", "rng")
    # The codec decoder's windows live in its own arena, touched by nothing the LM step does, so the served engine
    # may decode later chunks beside the next step (vocoder_overlap "auto"; the same audio bit for bit:
    # tests/runtime_tests/test_moss_tts_nano_runtime.py).
    overlap_vocoder = True

    def __init__(self, artifacts: Path, manifest: Manifest, threads: int | None = None, *, vocoder: bool = True,
                 encoders: bool = False) -> None:
        self.artifacts = Path(artifacts)
        self.manifest = manifest
        self.config: MossConfig = parse_config(manifest.config(CONFIG))
        c = self.config
        graph = partial(open_graph, self.artifacts, manifest, threads=threads)
        self.global_step, self.local_step = graph("global_step"), graph("local_step")
        if "audio_head" not in self.local_step.input_names:
            raise ArtifactError(f"{artifacts}: local_step holds its own codebook heads (an older export): re-export")
        self.local_code_step = graph("local_code_step")
        self.kv = KVArena(c.layers, c.heads, c.head_dim)
        self.wte = np.asarray(open_table(self.artifacts, spec.WTE), np.float32)
        self.audio = np.asarray(open_table(self.artifacts, spec.AUDIO_EMBEDDINGS), np.float32)  # [N_VQ, C, D]
        self.slot_embedding = self.wte[spec.AUDIO_ASSISTANT_SLOT_ID]
        found = [p for p in (self.artifacts / TOKENIZER_FILE, self.artifacts / "tokenizer" / TOKENIZER_FILE)
                 if p.is_file()]
        if not found:
            raise ArtifactError(f"{artifacts}: no {TOKENIZER_FILE} (nor tokenizer/{TOKENIZER_FILE}): re-export")
        self.tokenizer = MossTokenizer(found[0])
        self.prefixes: OrderedDict[bytes, list[F32]] = OrderedDict()  # voice prefix digest -> its global K/V
        self.prefix_hits = self.prefix_misses = 0
        size = manifest.vocoder_state_size
        if size is None:
            raise ArtifactError(f"{artifacts}/manifest.json has no vocoder state size: re-export")
        self.vocoder_state_size: int = size
        self.vocoder = ArenaVocoder(graph(codec.DECODER), size, self.vocoder_feeds) if vocoder else None
        self.encoder: OnnxGraph | None = graph(codec.ENCODER) if encoders else None
        self.sample_rate = manifest.sample_rate or spec.SAMPLE_RATE
        self.samples_per_frame = manifest.samples_per_frame or spec.SAMPLES_PER_FRAME
        self.frame_seconds = self.samples_per_frame / self.sample_rate
        self.num_codebooks = spec.N_VQ

    # --- FamilyModel ---------------------------------------------------------------------------------------

    @staticmethod
    def vocoder_feeds(frames: npt.NDArray[Any], arena: F32, rows: I64, position: I64) -> dict[str, npt.NDArray[Any]]:
        return {"codes": np.ascontiguousarray(frames, np.int64), "state": arena, "row": rows,
                "position": np.asarray(position, np.int64)}

    def admit(self, request: MossRequest) -> MossSequence:
        text = checked_text(request)
        max_frames, seed = resolve_limits(request)
        knobs = resolve_sampling(request)
        ref = self._reference(request)
        chunks = chunking.text_chunks(text, self.tokenizer.count)
        seq = MossSequence(
            initial_chunk_frames=request.initial_chunk_frames or DEFAULT_INITIAL_CHUNK_FRAMES,
            chunk_frames=request.chunk_frames or DEFAULT_CHUNK_FRAMES,
            text_tokens=sum(self.tokenizer.count(c) for c in chunks), audio_tokens=len(ref) * len(chunks),
            chunks=chunks, ref_codes=ref, sampling=knobs, max_frames=max_frames,
            rng=np.random.Generator(np.random.PCG64(seed)))
        self._start_chunk(seq, 0)
        return seq

    def prompt_rows(self, text: str, ref_codes: npt.NDArray[Any]) -> I64:
        """The voice-clone prompt rows [T, 17] of one text chunk."""
        return voice_clone_rows(self.tokenizer, text, ref_codes, self.config.audio_pad_id)

    def embed_rows(self, rows: I64) -> F32:
        """Rows [..., 17] -> [..., D]: wte(col 0), then + emb_k(c_k) for k = 0..15 (a pad adds nothing), float32,
        in the reference's order."""
        pad = self.config.audio_pad_id
        out: F32 = self.wte[rows[..., 0]].astype(np.float32)
        for k in range(self.audio.shape[0]):
            ids = rows[..., k + 1]
            valid = ids != pad
            out = out + self.audio[k][np.where(valid, ids, 0)] * valid[..., None].astype(np.float32)
        return out

    def prefill(self, work: list[tuple[Sequence, int]]) -> None:
        for s, _ in work:
            if isinstance(s, MossSequence) and s.prefilled == 0 and s.prefix_tokens:
                self._seed_prefix(s)
        work = [(s, min(n, s.prompt_tokens - s.prefilled)) for s, n in work]
        done = prefill_chunks(self.kv, work, MossSequence, lambda s: s.prompt_tokens + s.max_frames, self._global)
        if done:
            self._frames(done)

    def step(self, batch: list[Sequence]) -> None:
        step_frames(batch, MossSequence, self._frame_embeddings, self._global, self._frames)

    # --- the request's parts -------------------------------------------------------------------------------

    def _reference(self, request: MossRequest) -> I64:
        """The reference clip's codes [frames, 16]; InvalidRequest naming `ref_audio` without one."""
        if request.ref_audio_tokens is not None:
            return code_grid(request.ref_audio_tokens, spec.N_VQ, self.config.codebook_size, "ref_audio_tokens")
        if request.ref_audio is None:
            raise InvalidRequest(f"{rules.DISPLAY} requires 'ref_audio' (reference audio for voice cloning)",
                                 "ref_audio")
        return self.encode(np.asarray(request.ref_audio, np.float32))  # 48 kHz (say resamples it)

    def encode(self, audio: npt.NDArray[Any]) -> I64:
        """A 48 kHz mono clip's codes [frames, 16] through moss_codec_encoder (offline: `encoders`)."""
        if self.encoder is None:
            raise InvalidRequest("this model takes reference codes from its moss_codec_encoder, not reference audio",
                                 "ref_audio")
        return encode_reference(self.encoder, encoder_state_size(self.manifest), audio, self.sample_rate,
                                self.samples_per_frame)

    def _seed_prefix(self, seq: MossSequence) -> None:
        """Start the chunk's prompt from its voice prefix's K/V: computed alone (one sequence, from an empty past),
        kept by digest, so a voice's later requests and text chunks skip those positions, and a hit gives exactly
        what a miss computes (the same call every time)."""
        past = self.prefixes.get(seq.prefix_key)
        if past is None:
            assert seq.embeds is not None
            c = self.config
            grow = GrowingPast(c.layers, c.heads, c.head_dim)
            grow.step(self.global_step, np.ascontiguousarray(seq.embeds[None, :seq.prefix_tokens], np.float32))
            past = [np.ascontiguousarray(t[0]) for t in grow.kv]
            self.prefixes[seq.prefix_key] = past
            while len(self.prefixes) > PREFIX_CACHE_VOICES:
                self.prefixes.popitem(last=False)
            self.prefix_misses += 1
        else:
            self.prefixes.move_to_end(seq.prefix_key)
            self.prefix_hits += 1
        self.kv.seed(seq, past, seq.prompt_tokens + seq.max_frames)
        seq.prefilled = seq.prefix_tokens

    def _start_chunk(self, seq: MossSequence, index: int) -> None:
        """Lay out text chunk `index`'s prompt: its voice prefix from the cache (or computed alone), the rest
        prefilled by the engine's next prefills."""
        rows = self.prompt_rows(seq.chunks[index], seq.ref_codes)
        seq.chunk, seq.chunk_frames_made = index, 0
        seq.seen = np.zeros((spec.N_VQ, self.config.codebook_size), np.bool_)
        seq.embeds = self.embed_rows(rows)
        seq.prompt_tokens, seq.prefilled = len(rows), 0
        seq.last, seq.hidden = None, None
        seq.prefix_tokens = min(voice_prefix_length(self.tokenizer, seq.ref_codes), len(rows) - 1)
        seq.prefix_key = hashlib.sha256(np.ascontiguousarray(rows[:seq.prefix_tokens]).tobytes()).digest()

    def _end_chunk(self, seq: MossSequence, reason: str) -> None:
        """A text chunk is done: the next one starts (after a pause and a fresh vocoder stream), or the request
        ends with `reason`."""
        if seq.chunk + 1 >= len(seq.chunks):
            seq.finished = reason
            return
        seq.breaks[seq.frames_out] = seq.breaks.get(seq.frames_out, 0) + chunking.pause_samples(
            seq.chunks[seq.chunk], self.sample_rate)
        self.kv.release(seq)
        self._start_chunk(seq, seq.chunk + 1)

    # --- the stacks --------------------------------------------------------------------------------------

    def _global(self, seqs: list[MossSequence], x: F32) -> None:
        """New positions x [B, T, D] after each row's past (the arena's): each row's last hidden state."""
        out = self.kv.run(self.global_step, seqs, np.ascontiguousarray(x, np.float32))
        for r, s in enumerate(seqs):
            s.hidden = np.asarray(out["hidden"][r], np.float32)

    def _frame_embeddings(self, last: list[I64]) -> F32:
        rows = np.array([[spec.AUDIO_ASSISTANT_SLOT_ID, *f] for f in last], np.int64)
        return self.embed_rows(rows)

    def _first(self, x: F32) -> tuple[dict[str, npt.NDArray[Any]], list[F32]]:
        """local_step over a frame's first two positions x [B, 2, D] (the global hidden state, the slot): its
        outputs and a fresh local cache (ttscore.contract.moss_tts_nano.graphs.local_code_step_spec) holding their
        K/V in slots 0 and 1."""
        c = self.config
        feeds: dict[str, npt.NDArray[Any]] = {"inputs_embeds": np.ascontiguousarray(x, np.float32),
                                              "audio_head": self.audio[spec.head_codebook(x.shape[1] - 1)]}
        empty = np.zeros((x.shape[0], c.heads, 0, c.head_dim), np.float32)
        for i in range(c.local_layers):
            feeds[kv_names.past_key(i)] = feeds[kv_names.past_value(i)] = empty
        out = self.local_step.run(feeds)
        cache = []
        for i in range(c.local_layers):
            for new in (out[kv_names.new_key(i)], out[kv_names.new_value(i)]):
                t = np.zeros((x.shape[0], c.heads, spec.LOCAL_CACHE, c.head_dim), np.float32)
                t[:, :, :x.shape[1]] = new
                cache.append(t)
        return out, cache

    def _code(self, x: F32, position: int, cache: list[F32]) -> F32:
        """local_code_step at local `position` (>= 2) for x [B, D] over `cache` (slots < position written): the
        codebook's logits [B, C]; the position's K/V written into its slot in place (the last position's are
        never read)."""
        c = self.config
        feeds: dict[str, npt.NDArray[Any]] = {"inputs_embeds": np.ascontiguousarray(x, np.float32),
                                              "position": np.array([position], np.int64),
                                              "audio_head": self.audio[spec.head_codebook(position)]}
        for i in range(c.local_layers):
            feeds[spec.cache_key(i)], feeds[spec.cache_value(i)] = cache[2 * i], cache[2 * i + 1]
        out = self.local_code_step.run(feeds)
        if position < spec.LOCAL_CACHE:
            for i in range(c.local_layers):
                cache[2 * i][:, :, position] = out[kv_names.new_key(i)][:, :, 0]
                cache[2 * i + 1][:, :, position] = out[kv_names.new_value(i)][:, :, 0]
        logits: F32 = out["audio_logits"]
        return logits

    def _frames(self, seqs: list[MossSequence]) -> None:
        """The next frame of each sequence (all rows in lockstep through local_step), or its chunk's end."""
        c = self.config
        b = len(seqs)
        hidden = np.stack([s.hidden for s in seqs if s.hidden is not None]).astype(np.float32)
        x = np.stack([hidden, np.broadcast_to(self.slot_embedding, hidden.shape)], axis=1)
        out, cache = self._first(x)
        going = []
        for r, s in enumerate(seqs):
            k = s.sampling
            assert k is not None
            u = s.uniform() if k.do_sample else 0.0
            if sampling.continues(out["text_logits"][r], do_sample=k.do_sample, temperature=k.text_temperature,
                                  k=k.text_top_k, p=k.text_top_p, u=u):
                going.append(r)
            else:
                s.reason = "stop"
                self._end_chunk(s, "stop")
        if not going:
            return
        rows = [seqs[r] for r in going]
        logits = out["audio_logits"][going]
        if len(going) < b:
            cache = [t[going] for t in cache]
        codes = np.zeros((len(rows), c.n_vq), np.int64)
        knobs = [s.sampling for s in rows if s.sampling is not None]
        do_sample = np.array([k.do_sample for k in knobs])
        temperature = np.array([k.audio_temperature for k in knobs])
        top_k = np.array([k.audio_top_k for k in knobs])
        top_p = np.array([k.audio_top_p for k in knobs])
        penalty = np.array([k.audio_repetition_penalty for k in knobs])
        seen = np.stack([s.seen for s in rows if s.seen is not None])  # [B, N_VQ, C]
        # each sampled row's 16 code draws, in the order its codes take them (after its stop decision's)
        draws = np.stack([s.uniforms(c.n_vq) if k.do_sample else np.zeros(c.n_vq) for s, k in zip(rows, knobs,
                                                                                                 strict=True)])
        for q in range(c.n_vq):
            codes[:, q] = sampling.sample_codes(logits, seen[:, q], do_sample=do_sample, temperature=temperature,
                                                k=top_k, p=top_p, penalty=penalty, u=draws[:, q])
            if q + 1 < c.n_vq:
                logits = self._code(self.audio[q][codes[:, q]], q + 2, cache)
        for j, s in enumerate(rows):
            frame = codes[j].copy()
            s.last = frame
            assert s.seen is not None
            s.seen[np.arange(c.n_vq), frame] = True
            s.pending.append(frame)
            s.frames_out += 1
            s.chunk_frames_made += 1
            if s.chunk_frames_made >= s.max_frames:
                s.reason = "length"
                self._end_chunk(s, "length")
