"""VoxCPM2 over its exported graphs: tokenizer, prompt, per-patch decode, streaming AudioVAE vocoder.

A request's life (the engine's Sequence protocol): `admit` (tokenize, lay out the prompt; no model
call) -> `prefill` (the prompt through the base LM, the bridge and the residual LM, every chunk the
engine admitted in the same call batched together, left-padded; the call that completes a prompt
makes the first patch) -> `step` (both LMs advance one position for every
sequence in one batched call each, then one patch per sequence: heads, the LocDiT solver batched
across sequences, the local encoder) -> `release`. The engine's "frame" is one patch [P, D].

Randomness: each patch's diffusion noise is `rng.standard_normal((D, P), float32)` from the
request's `np.random.default_rng(seed)`, one draw per patch and nothing else, so a seed reproduces
a request exactly, alone or batched. Each LM's per-layer K/V lives in a K/V arena
(ttscore.runtime.kv), `exact`: its rows are fed in place, the graph cutting them to the mask's
longest past (`past_cut_to_mask`, ttscore.contract.kv), which the exported LM graphs must say.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ttscore.contract import voxcpm2 as spec
from ttscore.contract.errors import ArtifactError, InvalidRequest
from ttscore.contract.kv import cuts_past_to_mask
from ttscore.contract.manifest import Manifest
from ttscore.runtime.families.voxcpm2.checkpoint import VoxCPM2Info, parse_config
from ttscore.runtime.families.voxcpm2.request import VoxCPM2Request
from ttscore.runtime.families.voxcpm2.solver import SolveRow, solve
from ttscore.runtime.families.voxcpm2.tokenizer import TextTokenizer
from ttscore.runtime.family import Sequence
from ttscore.runtime.kv import KVArena
from ttscore.runtime.onnx import OnnxGraph, open_graph, open_table
from ttscore.runtime.step_kit import ArenaModel
from ttscore.runtime.vocoder import OrtVocoder

logger = logging.getLogger(__name__)

F32 = npt.NDArray[np.float32]


@dataclass
class VoxSequence(Sequence):
    ids: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    patches: F32 | None = None  # [T, P, D] prompt patches (zeros at text positions)
    audio: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, bool))
    embeds: F32 | None = None  # [T, H] prompt embeddings, made at the first prefill call
    feat_embeds: F32 | None = None  # [T, H] local-encoder embeddings (zeros at text positions)
    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    n_steps: int = spec.DEFAULT_INFERENCE_TIMESTEPS
    cfg_value: float = spec.DEFAULT_CFG_VALUE
    max_len: int = spec.DEFAULT_MAX_LEN
    lm_hidden: F32 | None = None
    res_hidden: F32 | None = None
    cond: F32 | None = None  # [D, P] the previous patch (the LocDiT's prefix condition)
    curr_embed: F32 | None = None  # [H] the last patch through the local encoder


class VoxCPM2Model(ArenaModel):
    """FamilyModel for an exported VoxCPM2 checkpoint (ttscore.runtime.family)."""

    sequence = VoxSequence

    def __init__(self, artifacts: Path, manifest: Manifest, threads: int | None = None, *,
                 vocoder: bool = True, encoders: bool = True) -> None:
        self.artifacts = artifacts
        self.manifest = manifest
        self.info: VoxCPM2Info = parse_config(manifest.config("config.json"))
        graph = partial(open_graph, artifacts, manifest, threads=threads)
        self.base_lm, self.residual_lm = graph("base_lm"), graph("residual_lm")
        for name in ("base_lm", "residual_lm"):  # the exact arenas feed rows longer than the mask
            if not cuts_past_to_mask(manifest.graphs[name]):
                raise ArtifactError(f"{artifacts}: {name} does not cut its past to the mask (exported before "
                                    "issue 37's in-place arena): re-export")
        lm, res = self.info.lm, self.info.residual
        self.base_kv = KVArena(lm.num_layers, lm.num_kv_heads, lm.head_dim, exact=True)
        self.res_kv = KVArena(res.num_layers, res.num_kv_heads, res.head_dim, exact=True)
        self.local_encoder, self.bridge, self.heads = graph("local_encoder"), graph("bridge"), graph("heads")
        self.locdit = graph("locdit_step")
        self.vae_encoder = graph("vae_encoder") if encoders else None
        self.state_size = decoder_state_size(manifest)
        self.vocoder: OrtVocoder | None = (
            OrtVocoder(graph("vae_decoder_stream"), self.state_size, self.vocoder_feeds) if vocoder else None
        )
        self.text_table = open_table(artifacts, "text_embeddings")
        self.tokenizer = TextTokenizer(artifacts / "tokenizer")
        self.num_codebooks = self.info.patch_size

    # --- FamilyModel -------------------------------------------------------------------------

    @property
    def frame_seconds(self) -> float:
        return self.info.samples_per_patch / self.info.sample_rate

    @property
    def vocoder_state_size(self) -> int:
        return self.state_size

    @staticmethod
    def vocoder_feeds(frames: npt.NDArray[Any], state: F32, position: npt.NDArray[np.int64]) -> dict[str, npt.NDArray[Any]]:
        """vae_decoder_stream's inputs (the audiovae_decoder model's too): patches [B, T, P, D] ->
        latent frames [B, D, T * P] in time order, and the state; the decoder keeps no position."""
        b, d = frames.shape[0], frames.shape[-1]
        latents = np.asarray(frames, np.float32).reshape(b, -1, d).transpose(0, 2, 1)
        return {"latents": np.ascontiguousarray(latents), "state": state}

    def admit(self, request: VoxCPM2Request) -> VoxSequence:
        spec.RULES.checked_text(request.text)
        if (request.prompt_patches is None) != (request.prompt_text is None):
            raise InvalidRequest("a continuation prompt needs both its audio and its transcript", "ref_text")
        rules = spec.RULES
        max_new = rules.field("max_new_tokens").check(request.max_new_tokens)
        seed = rules.field("seed").resolve(request.seed)  # none: DEFAULT_SEED (vLLM-Omni's deploy)
        n_steps = rules.field("inference_timesteps").resolve(request.inference_timesteps)
        first = rules.field("initial_codec_chunk_frames").resolve(request.initial_chunk_frames)
        chunk = rules.field("codec_chunk_frames").resolve(request.chunk_frames)
        cfg = spec.DEFAULT_CFG_VALUE if request.cfg_value is None else float(request.cfg_value)
        p, d = self.info.patch_size, self.info.feat_dim
        for name, patches in (("ref_audio", request.ref_patches), ("ref_audio", request.prompt_patches)):
            if patches is not None and (patches.ndim != 3 or patches.shape[1:] != (p, d) or patches.shape[0] < 1):
                raise InvalidRequest(f"reference patches must be [T, {p}, {d}], got {patches.shape}", name)
        text = (request.prompt_text or "") + request.text
        ids = [*self.tokenizer(text), spec.AUDIO_START_ID]
        target = len(self.tokenizer(request.text))
        segments: list[tuple[list[int], F32 | None]] = []  # (ids, patches or None for text)
        if request.ref_patches is not None:
            n = request.ref_patches.shape[0]
            segments.append(([spec.REF_AUDIO_START_ID], None))
            segments.append(([0] * n, request.ref_patches))
            segments.append(([spec.REF_AUDIO_END_ID], None))
        segments.append((ids, None))
        if request.prompt_patches is not None:
            segments.append(([0] * request.prompt_patches.shape[0], request.prompt_patches))
        all_ids: list[int] = []
        audio: list[bool] = []
        feats: list[F32] = []
        for seg_ids, seg_patches in segments:
            all_ids += seg_ids
            audio += [seg_patches is not None] * len(seg_ids)
            feats.append(np.zeros((len(seg_ids), p, d), np.float32) if seg_patches is None
                         else np.asarray(seg_patches, np.float32))
        patches = np.concatenate(feats)
        cap = spec.DEFAULT_MAX_LEN if max_new is None else max_new
        max_len = min(int(target * spec.LENGTH_RATIO + 10), cap)
        prefix = None
        if request.prompt_patches is not None:  # decode the last prompt patches first, drop their audio
            k = min(spec.STREAMING_PREFIX_LEN - 1, int(np.count_nonzero(audio)))
            prefix = patches[np.flatnonzero(audio)[-k:]]
        return VoxSequence(
            initial_chunk_frames=first,
            chunk_frames=chunk,
            text_tokens=len(ids),
            audio_tokens=int(np.count_nonzero(audio)),
            vocoder_prefix=prefix,
            prompt_tokens=len(all_ids),
            ids=np.array(all_ids, np.int64),
            patches=patches,
            audio=np.array(audio, bool),
            rng=np.random.default_rng(seed),
            n_steps=n_steps,
            cfg_value=cfg,
            max_len=max_len,
        )

    def _prompt_embeds(self, seq: VoxSequence) -> None:
        assert seq.patches is not None
        h = self.info.lm.hidden_size
        feat = np.zeros((len(seq.ids), h), np.float32)
        where = np.flatnonzero(seq.audio)
        if where.size:
            feat[where] = self.local_encoder.run({"feats": seq.patches[where]})["embeds"]
        text = np.asarray(self.text_table[seq.ids], np.float32)
        seq.embeds = np.where(seq.audio[:, None], feat, text).astype(np.float32)
        seq.feat_embeds = feat

    def prefill(self, work: list[tuple[Sequence, int]]) -> None:
        """Every admitted chunk in one batched call per graph: the base LM over the chunks left-padded
        to the longest (each row after its own past), the bridge over all their positions, the
        residual LM likewise; then the first patch of every prompt this call completes. A single
        chunk runs unpadded, exactly as alone."""
        rows = [(s, n) for s, n in work if isinstance(s, VoxSequence) and n > 0]
        if not rows:
            return
        seqs = [s for s, _ in rows]
        for s in seqs:
            if s.embeds is None:
                self._prompt_embeds(s)
        spans = [(s.prefilled, s.prefilled + n) for s, n in rows]
        lengths = [n for _, n in rows]
        h = self.info.lm.hidden_size
        x = np.zeros((len(rows), max(lengths), h), np.float32)
        for r, (s, (lo, hi)) in enumerate(zip(seqs, spans, strict=True)):
            assert s.embeds is not None
            x[r, x.shape[1] - (hi - lo):] = s.embeds[lo:hi]
        for s in seqs:
            for arena in (self.base_kv, self.res_kv):
                arena.acquire(s, s.prompt_tokens + s.max_len)
        lm_out = self.base_kv.run(self.base_lm, seqs, x, lengths)["hidden"]
        flat = np.concatenate([lm_out[r, lm_out.shape[1] - n:] for r, n in enumerate(lengths)])
        feat = np.concatenate([s.feat_embeds[lo:hi] for s, (lo, hi) in zip(seqs, spans, strict=True)
                               if s.feat_embeds is not None])
        mask = np.concatenate([s.audio[lo:hi] for s, (lo, hi) in zip(seqs, spans, strict=True)])
        out = self.bridge.run({"lm_out": flat, "feat_embeds": feat, "audio_mask": mask})
        ends = np.cumsum(lengths)
        res_in = np.zeros_like(x)
        for r, n in enumerate(lengths):
            res_in[r, x.shape[1] - n:] = out["residual_input"][ends[r] - n:ends[r]]
        res = self.res_kv.run(self.residual_lm, seqs, res_in, lengths)["hidden"]
        done: list[VoxSequence] = []
        for r, (s, (_, hi)) in enumerate(zip(seqs, spans, strict=True)):
            s.prefilled = hi
            if hi == s.prompt_tokens:
                s.lm_hidden, s.res_hidden = out["lm_hidden"][ends[r] - 1], res[r, -1]
                assert s.patches is not None
                s.cond = np.ascontiguousarray(s.patches[-1].T)
                done.append(s)
        if done:
            self._patch(done)

    def step(self, batch: list[Sequence]) -> None:
        seqs = [s for s in batch if isinstance(s, VoxSequence) and s.finished is None]
        if not seqs:
            return
        x = np.stack([s.curr_embed for s in seqs if s.curr_embed is not None])[:, None]
        lm_out = self.base_kv.run(self.base_lm, seqs, x)["hidden"][:, 0]
        out = self.bridge.run({"lm_out": lm_out, "feat_embeds": x[:, 0], "audio_mask": np.ones(len(seqs), bool)})
        res = self.res_kv.run(self.residual_lm, seqs, out["residual_input"][:, None])["hidden"]
        for i, s in enumerate(seqs):
            s.lm_hidden, s.res_hidden = out["lm_hidden"][i], res[i, 0]
        self._patch(seqs)

    def arenas(self) -> list[KVArena]:
        return [self.base_kv, self.res_kv]

    # --- internals ---------------------------------------------------------------------------

    def _patch(self, seqs: list[VoxSequence]) -> None:
        """One patch per sequence from its (lm_hidden, res_hidden); sets `finished` on stop or budget."""
        h = self.heads.run({
            "lm_hidden": np.stack([s.lm_hidden for s in seqs if s.lm_hidden is not None]),
            "residual_hidden": np.stack([s.res_hidden for s in seqs if s.res_hidden is not None]),
        })
        d, p = self.info.feat_dim, self.info.patch_size
        rows = [
            SolveRow(s.rng.standard_normal((d, p), dtype=np.float32), h["mu"][i], s.cond if s.cond is not None
                     else np.zeros((d, p), np.float32), s.n_steps, s.cfg_value)
            for i, s in enumerate(seqs)
        ]

        def run(x: F32, mu: F32, cond: F32, t: F32, dt: F32, cfg: F32) -> F32:
            v: F32 = self.locdit.run({"x": x, "mu": mu, "cond": cond, "t": t, "dt": dt, "cfg_value": cfg})["velocity"]
            return v

        patches = solve(rows, run, mean_mode=self.info.mean_mode)
        feats = np.stack([x.T for x in patches]).astype(np.float32)  # [B, P, D]
        embeds = self.local_encoder.run({"feats": feats})["embeds"]
        stop = h["stop_logits"].argmax(-1)
        for i, s in enumerate(seqs):
            s.pending.append(feats[i])
            s.cond = np.ascontiguousarray(patches[i])
            s.curr_embed = embeds[i]
            index = s.frames_out
            s.frames_out += 1
            if index > spec.MIN_LEN and int(stop[i]) == 1:
                s.finished = "stop"
            elif s.frames_out >= s.max_len:
                s.finished = "length"

    # --- reference audio ---------------------------------------------------------------------

    def encode_reference(self, audio: npt.NDArray[Any], sample_rate: int, *, pad: str = "right") -> F32:
        if self.vae_encoder is None:
            raise ArtifactError("loaded without encoders")
        return encode_reference(self.vae_encoder, self.info, audio, sample_rate, pad=pad)


def decoder_state_size(manifest: Manifest) -> int:
    """Floats of the streaming AudioVAE decoder's per-stream state (manifest `vae_decoder.state_size`)."""
    state_size = manifest.vae_decoder_state_size
    if state_size is None:
        raise ArtifactError(f"{manifest.path}/manifest.json has no vae_decoder.state_size: re-export")
    return state_size


def encode_reference(
    encoder: OnnxGraph, info: VoxCPM2Info, audio: npt.NDArray[Any], sample_rate: int, *, pad: str = "right",
    param: str = "ref_audio", rate_param: str | None = None,
) -> F32:
    """Audio -> patches [T, P, D] as the reference's `_encode_wav`: 16 kHz mono, zero-padded to
    whole patches (right for a cloning reference, left for a continuation prompt), VAE-encoded.
    The server's reference bounds apply (InvalidRequest naming `param` / `rate_param`)."""
    from ttscore.runtime.audio import check_reference, resample, to_mono

    wav = check_reference(to_mono(audio), int(sample_rate), param, rate_param)
    if int(sample_rate) != info.encode_sample_rate:
        wav = resample(wav, int(sample_rate), info.encode_sample_rate).astype(np.float32)
    n = info.encode_samples_per_patch
    extra = (-wav.size) % n
    wav = np.pad(wav, (extra, 0) if pad == "left" else (0, extra))
    lat = encoder.run({"audio": wav[None]})["latents"][0]  # [D, T * P]
    d, p = info.feat_dim, info.patch_size
    patches: F32 = np.ascontiguousarray(lat.reshape(d, -1, p).transpose(1, 2, 0), np.float32)
    return patches
