"""The CosyVoice3 reference, run in the "main" environment (transformers 4.57.3, diffusers 0.35.2,
x-transformers 2.11.24) through refenv: vLLM-Omni 0.30.0's own plain-torch modules from the release wheel,
imported without vLLM, around transformers' `Qwen2ForCausalLM`.

- The language model: `Qwen2ForCausalLM` from `CosyVoice-BlankEN/config.json` with `llm.pt`'s
  `llm.model.*` tensors, plus its two tables (`speech_embedding`, `llm_decoder`), as upstream's
  `Qwen2Encoder` / `CosyVoice3LM` hold them; the whole sequence recomputed every token (no cache).
  The prompt is `[sos, embed_tokens(ref_text + text), task_id, speech_embedding(prompt tokens)]`.
  Logits: `llm_decoder`, the 200 stop logits merged by logsumexp into eos (vLLM-Omni's compute_logits),
  log-softmax, then vLLM-Omni's own `_ras_sample_one` (CosyVoice3 model class) whose draws
  (`random_sample`: probabilities / Exp(1) noise, argmax) take the noise rows given as input:
  `ras_noise_i` [steps, 2, V] (the nucleus draw, then the repetition-aware redraw). Before
  `min_len` tokens a stop id is never taken (the stop logits are masked, as upstream's `ignore_eos`).
- The flow: vLLM-Omni's `CausalMaskedDiffWithDiT` (+ `PreLookaheadLayer`, `CausalConditionalCFM`, the
  `DiT` of cosyvoice3_dit.py) built from cosyvoice3.yaml's values with `flow.pt` loaded strictly; its
  noise (`torch.randn` in CausalConditionalCFM.forward) is the `flow_noise_i` rows given as input.
  vLLM-Omni's DiT only knows key-padding masks; the attention stand-in also applies `chunk_mask` when a
  request asks for upstream's chunk-causal streaming mask.
- The vocoder: vLLM-Omni's `CausalHiFTGenerator` (+ `CausalConvRNNF0Predictor`) from the yaml with
  `hift.pt` loaded strictly (a `generator.` prefix stripped as vLLM-Omni strips it); its fixed noise
  tables (SineGen2 `rand_ini`, `sine_waves`, SourceModuleHnNSF `uv`) are replaced by the
  `hift_rand_ini`, `hift_sine_noise`, `hift_uv_noise` inputs (position-indexed, wrapped as vLLM-Omni wraps).

vLLM stand-ins: every `vllm.*` / `vllm_omni.*` name outside the modules used becomes an inert placeholder,
`init_logger` is logging.getLogger, torchaudio is a shell (only the front-end uses it, never called here),
`vllm_omni.diffusion.attention.layer.Attention` is a 10-line SDPA with the key-padding mask.

`python cosyvoice3_reference.py IN.npz OUT.npz <vllm-omni wheel> <checkpoint> <json requests>`; a request
{"text_ids", "max_new_tokens", "min_new_tokens", "chunk_mask"}; inputs prompt_tokens_i, prompt_feat_i
[T, 80], embedding_i [192], ras_noise_i, flow_noise_i [80, mel_frames], hift_* -> tokens_i, mel_i
[80, frames], audio_i, state (`file name [shape]` of every tensor the modules hold).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import types
from pathlib import Path

import numpy as np
from vllm_omni_stubs import extract, stub

PREFIXES = ("vllm_omni/model_executor/models/cosyvoice3/", "vllm_omni/diffusion/models/cosyvoice3_audio/",
            "vllm_omni/model_executor/layers/timestep_embedding.py",
            "vllm_omni/model_executor/models/common/snake_activation.py",
            "vllm_omni/transformers_utils/configs/cosyvoice3.py")


class _Attention:
    """vllm_omni.diffusion.attention.layer.Attention on CPU: SDPA over (batch, seq, heads, head_dim) with the
    key-padding mask of attn_metadata, and `CHUNK_MASK` ([seq, seq] bool, True = may attend) when set."""

    CHUNK_MASK = None

    def __init__(self, num_heads, head_size, softmax_scale, causal=False, **_):
        self.scale = softmax_scale

    def __call__(self, q, k, v, attn_metadata=None):
        import torch.nn.functional as F

        mask = None
        if attn_metadata is not None and attn_metadata.attn_mask is not None:
            mask = attn_metadata.attn_mask[:, None, None, :]
        if _Attention.CHUNK_MASK is not None:
            chunk = _Attention.CHUNK_MASK[None, None]
            mask = chunk if mask is None else (mask & chunk)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             attn_mask=mask, scale=self.scale)
        return out.transpose(1, 2)


class _Metadata:
    def __init__(self, attn_mask=None):
        self.attn_mask = attn_mask


class _Noise:
    """The values `random_sample` / `torch.randn` return: rows given as input, in order."""

    def __init__(self) -> None:
        self.rows: list = []


NOISE = _Noise()


def _random_sample(probs, generators):
    """vLLM's random_sample (probs / Exp(1) noise, argmax) with the noise taken from NOISE."""
    import torch

    q = torch.as_tensor(NOISE.rows.pop(0), dtype=probs.dtype).reshape(probs.shape)
    return probs.div(q).argmax(dim=-1).view(-1)


class _NoiseTorch:
    """The `torch` a module sees, with `randn` answering from NOISE."""

    def __init__(self, torch_module: types.ModuleType) -> None:
        self._torch = torch_module

    def randn(self, *shape, dtype=None, device=None):
        return self._torch.as_tensor(NOISE.rows.pop(0), dtype=dtype).reshape(*shape)

    def __getattr__(self, name: str) -> object:
        return getattr(self._torch, name)


def load(wheel: str, where: str) -> dict[str, types.ModuleType]:
    import torch
    import transformers

    transformers.Qwen2Config  # noqa: B018  (resolve the lazy module before any stand-in)
    extract(wheel, where, PREFIXES)
    base = os.path.join(where, "vllm_omni")
    for pkg in ("vllm", "vllm.config", "vllm.config.multimodal", "vllm.forward_context", "vllm.inputs",
                "vllm.model_executor", "vllm.model_executor.models", "vllm.model_executor.models.interfaces",
                "vllm.model_executor.models.qwen2", "vllm.multimodal", "vllm.multimodal.inputs",
                "vllm.multimodal.parse", "vllm.multimodal.processing", "vllm.sequence", "vllm.v1", "vllm.v1.outputs",
                "vllm.v1.sample", "vllm.v1.sample.metadata", "vllm.v1.sample.sampler", "vllm_omni.data_entry_keys",
                "vllm_omni.inputs", "vllm_omni.inputs.mm_processor", "vllm_omni.model_executor.models.output_templates",
                "vllm_omni.transformers_utils.repo_utils", "vllm_omni.utils", "vllm_omni.utils.audio",
                "vllm_omni.utils.speaker_cache", "vllm_omni.diffusion.attention",
                "vllm_omni.diffusion.attention.backends", "torchaudio", "torchaudio.compliance",
                "torchaudio.compliance.kaldi", "omegaconf"):
        stub(pkg)
    sys.modules["torchaudio"].compliance = sys.modules["torchaudio.compliance"]  # type: ignore[attr-defined]
    sys.modules["torchaudio.compliance"].kaldi = sys.modules["torchaudio.compliance.kaldi"]  # type: ignore[attr-defined]
    stub("omegaconf", DictConfig=lambda d: types.SimpleNamespace(**d))
    stub("vllm.logger", init_logger=logging.getLogger)
    stub("vllm.v1.sample.ops", )
    stub("vllm.v1.sample.ops.topk_topp_sampler", random_sample=_random_sample)
    stub("vllm_omni.platforms", current_omni_platform=types.SimpleNamespace(device_type="cpu"))
    stub("vllm_omni.diffusion.attention.layer", Attention=_Attention)
    stub("vllm_omni.diffusion.attention.backends.abstract", AttentionMetadata=_Metadata)
    for pkg, rel in (("vllm_omni", ""), ("vllm_omni.model_executor", "model_executor"),
                     ("vllm_omni.model_executor.models", "model_executor/models"),
                     ("vllm_omni.model_executor.layers", "model_executor/layers"),
                     ("vllm_omni.model_executor.models.common", "model_executor/models/common"),
                     ("vllm_omni.model_executor.models.cosyvoice3", "model_executor/models/cosyvoice3"),
                     ("vllm_omni.diffusion", "diffusion"), ("vllm_omni.diffusion.models", "diffusion/models"),
                     ("vllm_omni.diffusion.models.cosyvoice3_audio", "diffusion/models/cosyvoice3_audio"),
                     ("vllm_omni.transformers_utils", "transformers_utils"),
                     ("vllm_omni.transformers_utils.configs", "transformers_utils/configs")):
        stub(pkg, [os.path.join(base, rel)])
    names = {"cfm": "vllm_omni.model_executor.models.cosyvoice3.code2wav_core.cfm",
             "layers": "vllm_omni.model_executor.models.cosyvoice3.code2wav_core.layers",
             "hifigan": "vllm_omni.model_executor.models.cosyvoice3.code2wav_core.hifigan",
             "dit": "vllm_omni.diffusion.models.cosyvoice3_audio.cosyvoice3_dit",
             "model": "vllm_omni.model_executor.models.cosyvoice3.cosyvoice3",
             "tokenizer": "vllm_omni.model_executor.models.cosyvoice3.tokenizer"}
    mods = {k: importlib.import_module(v) for k, v in names.items()}
    mods["cfm"].torch = _NoiseTorch(torch)  # CausalConditionalCFM's torch.randn -> the given flow noise
    return mods


def model_class(mods: dict) -> type:
    """The vLLM-Omni class that carries `_ras_sample_one`."""
    for obj in vars(mods["model"]).values():
        if isinstance(obj, type) and "_ras_sample_one" in vars(obj):
            return obj
    raise AssertionError("no class with _ras_sample_one in cosyvoice3.py")


def read_yaml(root: Path) -> dict:
    from ttscore.runtime.checkpoint_kit import read_hyperpyyaml as ours

    return ours(root / "cosyvoice3.yaml")


def build(root: Path, mods: dict) -> dict:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = read_yaml(root)
    f, h = cfg["flow"], cfg["hift"]
    d, e = f["decoder"], f["decoder"]["estimator"]
    estimator = mods["dit"].DiT(**{k: e[k] for k in ("dim", "depth", "heads", "dim_head", "ff_mult", "mel_dim",
                                                     "mu_dim", "spk_dim", "out_channels", "static_chunk_size",
                                                     "num_decoding_left_chunks")})
    cfm_params = types.SimpleNamespace(**d["cfm_params"].get("content", d["cfm_params"]))
    decoder = mods["cfm"].CausalConditionalCFM(d["in_channels"], cfm_params, n_spks=d["n_spks"],
                                               spk_emb_dim=d["spk_emb_dim"], estimator=estimator)
    pl = f["pre_lookahead_layer"]
    lookahead = mods["layers"].PreLookaheadLayer(pl["in_channels"], pl["channels"], pl["pre_lookahead_len"])
    flow = mods["cfm"].CausalMaskedDiffWithDiT(
        input_size=f["input_size"], output_size=f["output_size"], spk_embed_dim=f["spk_embed_dim"],
        vocab_size=f["vocab_size"], input_frame_rate=f["input_frame_rate"], token_mel_ratio=f["token_mel_ratio"],
        pre_lookahead_len=f["pre_lookahead_len"], pre_lookahead_layer=lookahead, decoder=decoder)
    flow.load_state_dict(torch.load(root / "flow.pt", map_location="cpu", weights_only=True), strict=True)
    hg = mods["hifigan"]
    fp = h["f0_predictor"]
    f0 = hg.CausalConvRNNF0Predictor(fp["num_class"], fp["in_channels"], fp["cond_channels"])
    hift = hg.CausalHiFTGenerator(**{k: v for k, v in h.items() if k != "f0_predictor"}, f0_predictor=f0)
    state = {k.removeprefix("generator."): v
             for k, v in torch.load(root / "hift.pt", map_location="cpu", weights_only=True).items()}
    hift.load_state_dict(state, strict=True)
    llm = torch.load(root / "llm.pt", map_location="cpu", weights_only=True)
    qcfg = Qwen2Config.from_pretrained(str(root / "CosyVoice-BlankEN"))
    qcfg._attn_implementation = "eager"
    lm = Qwen2ForCausalLM(qcfg)
    lm.load_state_dict({k.removeprefix("llm.model."): v for k, v in llm.items() if k.startswith("llm.model.")},
                       strict=True)
    size = cfg["llm"]["speech_token_size"]
    speech_embedding = torch.nn.Embedding(size + 200, llm["speech_embedding.weight"].shape[1])
    speech_embedding.load_state_dict({"weight": llm["speech_embedding.weight"]})
    llm_decoder = torch.nn.Linear(llm["llm_decoder.weight"].shape[1], size + 200, bias=False)
    llm_decoder.load_state_dict({"weight": llm["llm_decoder.weight"]})
    extra = set(llm) - {"speech_embedding.weight", "llm_decoder.weight"} - {k for k in llm if k.startswith("llm.model.")}
    if extra:
        raise AssertionError(f"llm.pt: tensors the reference does not hold: {sorted(extra)}")
    return {"cfg": cfg, "flow": flow.eval(), "hift": hift.eval(), "lm": lm.eval(),
            "speech_embedding": speech_embedding, "llm_decoder": llm_decoder, "size": size}


def state_entries(ref: dict) -> list[str]:
    out = [f"llm.pt llm.model.{k} {list(v.shape)}" for k, v in ref["lm"].state_dict().items()]
    out += [f"llm.pt speech_embedding.weight {list(ref['speech_embedding'].weight.shape)}",
            f"llm.pt llm_decoder.weight {list(ref['llm_decoder'].weight.shape)}"]
    out += [f"flow.pt {k} {list(v.shape)}" for k, v in ref["flow"].state_dict().items()]
    out += [f"hift.pt {k} {list(v.shape)}" for k, v in ref["hift"].state_dict().items()]
    return out


def chunk_mask(frames: int, chunk: int):
    """Upstream's streaming mask (add_optional_chunk_mask, static chunk, all left chunks): frame i may
    attend to frame j when j < (i // chunk + 1) * chunk."""
    import torch

    idx = torch.arange(frames)
    return idx[None, :] < ((idx[:, None] // chunk) + 1) * chunk


def generate_tokens(ref: dict, mods: dict, text_ids: list[int], prompt_tokens, noise, min_len: int,
                    max_len: int) -> list[int]:
    import torch

    cls = model_class(mods)
    size = ref["size"]
    lm, emb = ref["lm"], ref["speech_embedding"]
    text = lm.model.embed_tokens(torch.tensor(text_ids, dtype=torch.long))
    sos, task = emb.weight[size], emb.weight[size + 2]
    seq = torch.cat([sos[None], text, task[None], emb(torch.as_tensor(prompt_tokens, dtype=torch.long))])[None]
    NOISE.rows = [row for step in noise for row in step]
    out: list[int] = []
    samp = ref["cfg"]["llm"].get("sampling", {})
    for i in range(max_len):
        hidden = lm.model(inputs_embeds=seq, use_cache=False).last_hidden_state[0, -1]
        logits = ref["llm_decoder"](hidden)
        merged = torch.logsumexp(logits[size:], dim=-1)
        logits = logits.clone()
        logits[size:] = float("-inf")
        if i >= min_len:
            logits[size + 1] = merged
        scores = torch.log_softmax(logits, dim=0)
        consumed = len(NOISE.rows)
        tok = cls._ras_sample_one(scores, out, top_p=samp.get("top_p", 0.8), top_k=samp.get("top_k", 25),
                                  win_size=samp.get("win_size", 10), tau_r=samp.get("tau_r", 0.1), generator=None)
        if consumed - len(NOISE.rows) == 1:
            NOISE.rows.pop(0)  # the redraw's noise row of this step was not needed
        if tok >= size:
            break
        out.append(int(tok))
        seq = torch.cat([seq, emb.weight[tok][None, None]], dim=1)
    return out


def token2mel(ref: dict, tokens, prompt_tokens, prompt_feat, embedding, noise, chunked: bool):
    import torch

    flow = ref["flow"]
    tok = torch.as_tensor(np.asarray(tokens, np.int64))[None]
    ptok = torch.as_tensor(np.asarray(prompt_tokens, np.int64))[None]
    frames = 2 * (tok.shape[1] + ptok.shape[1])
    chunk = int(ref["cfg"]["flow"]["decoder"]["estimator"]["static_chunk_size"])
    _Attention.CHUNK_MASK = chunk_mask(frames, chunk) if chunked else None
    NOISE.rows = [np.asarray(noise, np.float32)[None]]
    try:
        mel, _ = flow.inference(tok, torch.tensor([tok.shape[1]]), ptok, torch.tensor([ptok.shape[1]]),
                                torch.as_tensor(np.asarray(prompt_feat, np.float32))[None],
                                torch.tensor([len(prompt_feat)]),
                                torch.as_tensor(np.asarray(embedding, np.float32))[None], streaming=chunked,
                                finalize=True)
    finally:
        _Attention.CHUNK_MASK = None
    return mel[0]


def set_hift_noise(hift, rand_ini, sine, uv) -> None:
    import torch

    gen = hift.m_source.l_sin_gen
    gen.rand_ini = torch.as_tensor(np.asarray(rand_ini, np.float32)).reshape(1, -1)
    gen.sine_waves = torch.as_tensor(np.asarray(sine, np.float32))[None]
    hift.m_source.uv = torch.as_tensor(np.asarray(uv, np.float32)).reshape(1, -1, 1)


def mel2wav(ref: dict, mel):
    import torch

    wav, _, _ = ref["hift"].inference(speech_feat=torch.as_tensor(np.asarray(mel, np.float32))[None], finalize=True)
    return wav.reshape(-1)


def main(inputs: dict, wheel: str, checkpoint: str, requests: str) -> dict:
    import torch

    torch.manual_seed(0)
    root = Path(checkpoint)
    mods = load(wheel, os.getcwd())  # refenv's temporary working directory
    ref = build(root, mods)
    out: dict = {"state": np.array(state_entries(ref))}
    set_hift_noise(ref["hift"], inputs["hift_rand_ini"], inputs["hift_sine_noise"], inputs["hift_uv_noise"])
    with torch.inference_mode():
        for i, req in enumerate(json.loads(requests)):
            ptok = inputs[f"prompt_tokens_{i}"]
            if "tokens" in req:
                tokens = list(req["tokens"])
            else:
                tokens = generate_tokens(ref, mods, req["text_ids"], ptok, inputs[f"ras_noise_{i}"],
                                         int(req["min_new_tokens"]), int(req["max_new_tokens"]))
            out[f"tokens_{i}"] = np.array(tokens, np.int64)
            if not tokens or not req.get("decode", True):
                continue
            noise = inputs[f"flow_noise_{i}"][:, :2 * (len(tokens) + len(ptok))]
            mel = token2mel(ref, tokens, ptok, inputs[f"prompt_feat_{i}"], inputs[f"embedding_{i}"], noise,
                            bool(req.get("chunk_mask", False)))
            out[f"mel_{i}"] = mel.numpy()
            out[f"audio_{i}"] = mel2wav(ref, mel).numpy()
    return out


if __name__ == "__main__":
    from refenv import serve

    serve(main)
