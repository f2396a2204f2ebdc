"""The Fish Speech S2 Pro reference, run in "ref5" through refenv: vLLM-Omni 0.30.0's own fish_speech package
from the release wheel, imported without vLLM.

- Slow AR step logic: `FishSpeechSlowARForConditionalGeneration`'s own methods on an instance built without
  its vLLM constructor (`compute_logits`: the semantic + `<|im_end|>` mask; `_build_prefill_embeds` (text only)
  and `_apply_codebook_embeddings` (cloning: the prompt of prompt_utils with the reference codes' codebook
  embeddings added, over sqrt(11)); `talker_mtp`: the Fast AR and the next input embedding).
- Fast AR: `FishSpeechFastAR` itself (its per-step KV cache, top-k/top-p, the 1024-way residual logits).
- Slow AR backbone: vLLM's Qwen3Model is not importable without vLLM; the same Qwen3 decoder layers are
  vLLM-Omni's own `FishSpeechFastARModel` built from the Slow AR config (qk-norm on), run over the whole
  sequence every frame (no cache), then the final norm (vLLM's Qwen3Model returns post-norm states); equal to
  transformers' stock Qwen3Model on the same weights (tests/fish_speech_hf_check.py).
- Slow AR sampling: vLLM's sampler (not in the wheel), written out: temperature, then vLLM's
  `apply_top_k_top_p` (ascending sort; top-k keeps logits >= the k-th; top-p drops the ascending-cumulative
  mass <= 1 - p, the top one always kept), then `probs / q` argmax with q ~ Exp(1) (vLLM's random_sample).
- Codec: vLLM-Omni's `dac_modules` DAC built with the checkpoint's dimensions (build_dac_codec's topology,
  the widths read from codec.pth's shapes), loaded with every parameter placed (`strict=False` as
  vLLM-Omni, then checked: only the transformers' mask/rope buffers may be absent), `decode` of the whole
  utterance, `encode` of a 44.1 kHz reference clip (dac_encoder.encode_reference_audio_codes' path).

Precision: vLLM-Omni serves in bf16; here its bf16 casts are float32 casts (the modules' `torch.bfloat16`
reads float32), while the RoPE tables keep their bf16 rounding (what `load_weights` does "to match
training", for every rotary embedding, the Fast AR's included).

Noise fed: the Slow AR's exponential noise `q_slow_i` [frames(+1), 4097] (the 4096 semantic ids, then
`<|im_end|>`), the Fast AR's `q_fast_i` [frames, 9, 1024] replacing its `torch.multinomial` (argmax of
probs / q, an exact draw from probs). Without them the script draws them from numpy's default_rng(seed).

vLLM stand-ins (nothing else of vLLM runs): its linear layers become nn.Linear returning (y, None) with
vLLM's shard weight loaders; RMSNorm is vLLM's forward_native; get_rope is vLLM's RotaryEmbedding
(cos/sin cache from inv_freq = 1 / base^(2i/d), GPT-J interleaved rotation when is_neox_style is False).

`python fish_speech_reference.py IN.npz OUT.npz <wheel> <checkpoint> <json requests>`, a request
{"text", "max_new_tokens", "seed", optional "temperature", "top_k", "top_p", "ref_text", and "ref_audio_i"
[samples] at 44.1 kHz in IN.npz for cloning} -> prompt_ids_i, codes_i [frames, 10], stopped_i, audio_i,
ref_codes_i (cloning), q_slow_i, q_fast_i (the noise used), hidden_i [frames, dim]; real_codec_state (`name
[shape]` of each tensor of vLLM-Omni's build_dac_codec(), built on the meta device).
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

PACKAGE = "vllm_omni/model_executor/models/fish_speech"
SEMANTIC = 4096
RESIDUAL = 1024


def _vllm_layers():
    """The smallest stand-ins for the vLLM layers FishSpeechFastAR builds."""
    import torch
    from torch import nn

    def default_weight_loader(param, loaded) -> None:
        param.data.copy_(loaded)

    class _Linear(nn.Linear):
        def __init__(self, i: int, o: int, bias: bool) -> None:
            super().__init__(i, o, bias=bias)

        def forward(self, x):  # vLLM's linear layers return (output, bias)
            return super().forward(x), None

    class QKVParallelLinear(_Linear):
        def __init__(self, hidden_size, head_size, total_num_heads, total_num_kv_heads, bias=False, **_):
            self.sizes = {"q": total_num_heads * head_size, "k": total_num_kv_heads * head_size,
                          "v": total_num_kv_heads * head_size}
            super().__init__(hidden_size, sum(self.sizes.values()), bias)

            def loader(param, loaded, shard):
                start = {"q": 0, "k": self.sizes["q"], "v": self.sizes["q"] + self.sizes["k"]}[shard]
                param.data[start:start + self.sizes[shard]].copy_(loaded)
            self.weight.weight_loader = loader  # type: ignore[attr-defined]

    class MergedColumnParallelLinear(_Linear):
        def __init__(self, input_size, output_sizes, bias=False, **_):
            super().__init__(input_size, sum(output_sizes), bias)

            def loader(param, loaded, shard):
                start = sum(output_sizes[:shard])
                param.data[start:start + output_sizes[shard]].copy_(loaded)
            self.weight.weight_loader = loader  # type: ignore[attr-defined]

    class RowParallelLinear(_Linear):
        def __init__(self, input_size, output_size, bias=False, **_):
            super().__init__(input_size, output_size, bias)

    class RMSNorm(nn.Module):  # vLLM's RMSNorm.forward_native (no residual)
        def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps

        def forward(self, x):
            dtype = x.dtype
            x = x.to(torch.float32)
            x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.variance_epsilon)
            return x.to(dtype) * self.weight

    class RotaryEmbedding(nn.Module):  # vLLM's RotaryEmbedding.forward_native
        def __init__(self, head_size: int, max_position: int, base: float, is_neox_style: bool) -> None:
            super().__init__()
            self.head_size, self.is_neox_style = head_size, is_neox_style
            inv_freq = 1.0 / (base ** (torch.arange(0, head_size, 2, dtype=torch.float) / head_size))
            freqs = torch.einsum("i,j -> ij", torch.arange(max_position, dtype=torch.float), inv_freq)
            self.register_buffer("cos_sin_cache", torch.cat((freqs.cos(), freqs.sin()), dim=-1), persistent=False)

        def _rotate(self, x, cos, sin):
            cos, sin = cos.unsqueeze(-2).to(x.dtype), sin.unsqueeze(-2).to(x.dtype)
            if self.is_neox_style:
                x1, x2 = torch.chunk(x, 2, dim=-1)
            else:
                x1, x2 = x[..., ::2], x[..., 1::2]
            o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
            return torch.cat((o1, o2), dim=-1) if self.is_neox_style else torch.stack((o1, o2), dim=-1).flatten(-2)

        def forward(self, positions, query, key):
            cos, sin = self.cos_sin_cache.index_select(0, positions.flatten()).chunk(2, dim=-1)
            n = positions.numel()
            q = self._rotate(query.view(n, -1, self.head_size), cos, sin).reshape(query.shape)
            k = self._rotate(key.view(n, -1, self.head_size), cos, sin).reshape(key.shape)
            return q, k

    def get_rope(head_size, max_position, is_neox_style=True, rope_parameters=None, **_):
        return RotaryEmbedding(head_size, max_position, float((rope_parameters or {}).get("rope_theta", 10000.0)),
                               is_neox_style)

    return dict(QKVParallelLinear=QKVParallelLinear, MergedColumnParallelLinear=MergedColumnParallelLinear,
                RowParallelLinear=RowParallelLinear, RMSNorm=RMSNorm, get_rope=get_rope,
                default_weight_loader=default_weight_loader)


class _Torch:
    """The `torch` a vLLM-Omni module sees: bfloat16 reads float32; `multinomial` answers from fed noise."""

    def __init__(self, torch_module: types.ModuleType) -> None:
        self._torch = torch_module
        self.bfloat16 = torch_module.float32
        self.q_rows: list = []

    def multinomial(self, probs, num_samples=1, generator=None):
        q = self._torch.as_tensor(self.q_rows.pop(0), dtype=probs.dtype).reshape(probs.shape)
        return (probs / q).argmax(dim=-1, keepdim=True)

    def __getattr__(self, name: str) -> object:
        return getattr(self._torch, name)


def load(wheel: str, where: str) -> dict[str, types.ModuleType]:
    import contextlib

    extract(wheel, where, PACKAGE + "/")
    layers = _vllm_layers()
    for pkg in ("vllm", "vllm.config", "vllm.config.vllm", "vllm.distributed", "vllm.model_executor",
                "vllm.model_executor.layers", "vllm.model_executor.layers.logits_processor",
                "vllm.model_executor.layers.vocab_parallel_embedding", "vllm.model_executor.models",
                "vllm.model_executor.models.qwen3", "vllm.model_executor.models.utils", "vllm.sequence",
                "vllm_omni", "vllm_omni.model_executor", "vllm_omni.model_executor.models",
                "vllm_omni.model_executor.models.output_templates", "vllm_omni.utils",
                "vllm_omni.utils.speaker_cache"):
        stub(pkg)
    sys.modules["vllm.config.vllm"].set_current_vllm_config = lambda *a, **k: contextlib.nullcontext()
    stub("vllm.logger", init_logger=logging.getLogger)
    stub("vllm.model_executor.layers.layernorm", RMSNorm=layers["RMSNorm"])
    stub("vllm.model_executor.layers.linear", **{k: layers[k] for k in (
        "QKVParallelLinear", "MergedColumnParallelLinear", "RowParallelLinear")})
    stub("vllm.model_executor.layers.rotary_embedding", get_rope=layers["get_rope"])
    stub("vllm.model_executor.model_loader", __path__=[])
    stub("vllm.model_executor.model_loader.weight_utils", default_weight_loader=layers["default_weight_loader"],
          maybe_remap_kv_scale_name=lambda name, params: name)
    sys.modules["vllm.model_executor.models.utils"].is_pp_missing_parameter = lambda name, module: False
    stub("vllm_omni.platforms", current_omni_platform=types.SimpleNamespace(device_type="cpu",
                                                                              is_npu=lambda: False))
    stub("vllm_omni.model_executor.models.fish_speech").__path__ = [os.path.join(where, PACKAGE)]
    names = ("configuration_fish_speech", "prompt_utils", "fish_speech_fast_ar", "fish_speech_slow_ar",
             "dac_modules")
    return {n: importlib.import_module(f"vllm_omni.model_executor.models.fish_speech.{n}") for n in names}


def build_codec(mods: dict, root: Path):
    """vLLM-Omni's DAC with the checkpoint's widths (dac_utils.build_dac_codec's topology), codec.pth loaded."""

    from ttscore.runtime.families.fish_speech.checkpoint import CODEC_BUFFERS, read_codec

    dac = mods["dac_modules"]
    state, d = read_codec(root)
    base = dict(block_size=16384, n_local_heads=-1, head_dim=64, rope_base=10000, norm_eps=1e-5, dropout_rate=0.0,
                attn_dropout_rate=0.0, channels_first=True)

    def general(**kw):
        return dac.ModelArgs(**{**base, **kw})

    def window(n_layer):
        cfg = dac.ModelArgs(block_size=4096, n_layer=n_layer, n_head=d.latent_dim // 64, dim=d.latent_dim,
                            intermediate_size=d.quantizer_ffn, n_local_heads=-1, head_dim=64, rope_base=10000,
                            norm_eps=1e-5, dropout_rate=0.0, attn_dropout_rate=0.0, channels_first=True)
        return dac.WindowLimitedTransformer(causal=True, window_size=128, input_dim=d.latent_dim, config=cfg)

    quantizer = dac.DownsampleResidualVectorQuantize(
        input_dim=d.latent_dim, n_codebooks=d.n_residual, codebook_size=d.residual_codebook_size,
        codebook_dim=d.codebook_dim, quantizer_dropout=0.0, downsample_factor=list(d.downsample),
        post_module=window(d.quantizer_layers[1]), pre_module=window(d.quantizer_layers[0]),
        semantic_codebook_size=d.semantic_codebook_size)
    codec = dac.DAC(encoder_dim=d.encoder_dim, encoder_rates=list(d.encoder_rates), decoder_dim=d.decoder_dim,
                    decoder_rates=list(d.decoder_rates), quantizer=quantizer, sample_rate=44100, causal=True,
                    encoder_transformer_layers=list(d.encoder_layers), decoder_transformer_layers=[0] * 4,
                    transformer_general_config=general)
    missing, unexpected = codec.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith(CODEC_BUFFERS)]
    if missing or unexpected:
        raise KeyError(f"codec.pth does not fit the DAC: missing {missing[:8]}, unexpected {unexpected[:8]}")
    return codec.float().eval(), d


def build(mods: dict, root: Path):
    """The Slow AR object (vLLM-Omni's class, its methods), its backbone, the tokenizer."""
    import torch
    from safetensors.torch import load_file
    from torch import nn
    from transformers import AutoTokenizer

    cfg_mod, fast_mod, slow_mod = (mods[n] for n in ("configuration_fish_speech", "fish_speech_fast_ar",
                                                     "fish_speech_slow_ar"))
    config = cfg_mod.FishSpeechConfig(**{k: v for k, v in json.loads((root / "config.json").read_text()).items()
                                         if k in ("text_config", "audio_decoder_config", "semantic_start_token_id",
                                                  "semantic_end_token_id", "audio_pad_token_id")})
    text_cfg, fast_cfg = config.text_config, config.audio_decoder_config
    weights = dict(slow_mod._remap_fish_speech_weights(
        ((k, v.float()) for k, v in load_file(str(root / "model.safetensors")).items()),
        text_cfg.num_attention_heads, text_cfg.num_key_value_heads, text_cfg.head_dim,
        fast_cfg.num_attention_heads, fast_cfg.num_key_value_heads, fast_cfg.head_dim))
    cls = slow_mod.FishSpeechSlowARForConditionalGeneration
    slow = cls.__new__(cls)
    nn.Module.__init__(slow)
    slow.config, slow.text_config, slow.fast_ar_config = config, text_cfg, fast_cfg
    slow._semantic_begin_id = int(config.semantic_start_token_id)
    slow._semantic_end_id = int(config.semantic_end_token_id)
    slow._audio_pad_token_id = int(config.audio_pad_token_id)
    slow._codebook_size = int(text_cfg.codebook_size)
    slow._num_codebooks = int(text_cfg.num_codebooks)
    slow.codebook_embeddings = nn.Embedding(slow._codebook_size * slow._num_codebooks, text_cfg.hidden_size)
    slow.fast_ar = fast_mod.FishSpeechFastAR(vllm_config=None, config=fast_cfg, slow_ar_config=text_cfg)
    # The backbone: Qwen3 layers (vLLM-Omni's own, qk-norm from the Slow AR config), embedding, final norm.
    backbone_cfg = cfg_mod.FishSpeechFastARConfig(
        vocab_size=text_cfg.vocab_size, dim=text_cfg.hidden_size, n_head=text_cfg.num_attention_heads,
        n_local_heads=text_cfg.num_key_value_heads, head_dim=text_cfg.head_dim, n_layer=text_cfg.num_hidden_layers,
        intermediate_size=text_cfg.intermediate_size, max_seq_len=text_cfg.max_position_embeddings,
        attention_qk_norm=text_cfg.attention_qk_norm, rope_base=text_cfg.rope_theta, rms_norm_eps=text_cfg.rms_norm_eps)
    backbone = fast_mod.FishSpeechFastARModel(backbone_cfg)
    embed = nn.Embedding(text_cfg.vocab_size, text_cfg.hidden_size)
    norm = fast_mod.RMSNorm(text_cfg.hidden_size, eps=text_cfg.rms_norm_eps)
    slow.model = types.SimpleNamespace(embed_input_ids=embed)
    slow.lm_head = embed  # tied (load_weights copies the embedding into lm_head)
    slow.logits_processor = lambda head, hidden: hidden @ head.weight.T
    vocab = int(text_cfg.vocab_size)
    mask = torch.zeros((vocab,), dtype=torch.bool)
    mask[slow._semantic_begin_id:min(slow._semantic_end_id + 1, vocab)] = True
    mask[151645] = True  # vLLM-Omni's hard-coded <|im_end|>
    slow.register_buffer("_semantic_allowed_mask", mask, persistent=False)

    backbone_w = {k[len("model."):]: v for k, v in weights.items() if k.startswith("model.layers.")}
    fast_w = {k[len("fast_ar."):]: v for k, v in weights.items() if k.startswith("fast_ar.")}
    placed = set(backbone.load_weights(backbone_w.items())) | {f"fast_ar.{n}" for n in slow.fast_ar.load_weights(
        ((k, v) for k, v in fast_w.items() if not k.startswith("model.")))}
    placed |= {f"fast_ar.model.{n}" for n in slow.fast_ar.model.load_weights(
        (k[len("model."):], v) for k, v in fast_w.items() if k.startswith("model."))}
    embed.weight.data.copy_(weights.pop("model.embed_tokens.weight"))
    norm.weight.data.copy_(weights.pop("model.norm.weight"))
    slow.codebook_embeddings.weight.data.copy_(weights.pop("codebook_embeddings.weight"))
    want = {n for n, _ in backbone.named_parameters()} | {f"fast_ar.{n}" for n, _ in slow.fast_ar.named_parameters()}
    missing = sorted(want - {n for n in placed})
    extra = sorted(k for k in weights if not k.startswith(("model.layers.", "fast_ar.")))
    if missing or extra:
        raise KeyError(f"Slow/Fast AR weights: not loaded {missing[:8]}, not placed {extra[:8]}")
    # load_weights: every RoPE cos/sin cache rounded to bf16 ("to match training").
    for module in list(backbone.modules()) + list(slow.fast_ar.modules()):
        if isinstance(getattr(module, "cos_sin_cache", None), torch.Tensor):
            module.cos_sin_cache = module.cos_sin_cache.to(torch.bfloat16).to(torch.float32)

    def hidden_of(embeds):
        positions = torch.arange(embeds.shape[0])[None]
        return norm(backbone(embeds[None], positions))[0]

    tokenizer = AutoTokenizer.from_pretrained(str(root))
    slow._tokenizer = tokenizer
    return slow.eval(), hidden_of, tokenizer


def vllm_sample(logits, temperature: float, top_k: int, top_p: float, q):
    """vLLM's sampler for one row: temperature, apply_top_k_top_p, then argmax(probs / q)."""
    import torch

    if temperature < 1e-5:  # vLLM's _SAMPLING_EPS: greedy
        return int(logits.argmax())
    logits = logits.float() / temperature
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    if top_k > 0:
        kth = logits_sort.gather(-1, torch.tensor([logits_sort.shape[-1] - top_k]))
        logits_sort = logits_sort.masked_fill(logits_sort < kth, -float("inf"))
    if top_p < 1.0:
        probs_sum = torch.cumsum(logits_sort.softmax(dim=-1), dim=-1)
        drop = probs_sum <= 1 - top_p
        drop[-1] = False
        logits_sort = logits_sort.masked_fill(drop, -float("inf"))
    logits = logits_sort.scatter(-1, logits_idx, logits_sort)
    probs = logits.softmax(dim=-1)
    return int((probs / q).argmax())


def generate(slow, hidden_of, tokenizer, mods, codec, req: dict, fed: tuple | None, ref_codes):
    import torch

    prompts = mods["prompt_utils"]
    text = req["text"]
    if ref_codes is not None:
        semantic_ids = (ref_codes[:, 0] + slow._semantic_begin_id).tolist()
        ids, _, _ = prompts.build_fish_voice_clone_prompt_ids(tokenizer, text, req["ref_text"], semantic_ids)
        embeds = slow._apply_codebook_embeddings(tokenizer, text, req["ref_text"], ref_codes)
    else:
        ids, _ = prompts.build_fish_text_only_prompt_ids(tokenizer, text)
        embeds = slow._build_prefill_embeds(torch.tensor(ids), {})
    temperature = float(req.get("temperature", 0.8))
    top_k, top_p = int(req.get("top_k", 30)), float(req.get("top_p", 0.9))
    steps = int(req["max_new_tokens"])
    if fed is None:
        rng = np.random.default_rng(int(req["seed"]))
        q_slow = rng.exponential(size=(steps, SEMANTIC + 1)).astype(np.float32)
        q_fast = rng.exponential(size=(steps, slow._num_codebooks - 1, RESIDUAL)).astype(np.float32)
    else:
        q_slow, q_fast = fed
    fast_torch = mods["fish_speech_fast_ar"].torch
    allowed = torch.cat([torch.arange(slow._semantic_begin_id, slow._semantic_end_id + 1), torch.tensor([151645])])
    seq = embeds.float()
    frames, hiddens, stopped = [], [], False
    for t in range(steps):
        h = hidden_of(seq)[-1]
        logits = slow.compute_logits(h[None])[0]
        q = torch.ones_like(logits)
        q[allowed] = torch.as_tensor(q_slow[t])
        y = vllm_sample(logits, temperature, top_k, top_p, q)
        if y == 151645:
            stopped = True
            break
        fast_torch.q_rows = [q_fast[t, j][None] for j in range(slow._num_codebooks - 1)]
        nxt, codes = slow.talker_mtp(torch.tensor([y]), slow.model.embed_input_ids(torch.tensor([[y]]))[0], h[None],
                                     None)  # as vLLM-Omni's runner calls it: no subtalker sampling params
        assert not fast_torch.q_rows  # the Fast AR sampled every residual code (at its own 0.8/30/0.9)
        fast_torch.q_rows = []
        frames.append(codes[0].numpy())
        hiddens.append(h.numpy())
        seq = torch.cat([seq, nxt.float()], dim=0)
    codes = np.array(frames, np.int64).reshape(-1, slow._num_codebooks)
    audio = np.zeros(0, np.float32)
    if len(codes):
        with torch.no_grad():
            wav, _ = codec.decode(torch.as_tensor(codes.T)[None], torch.tensor([len(codes)]))
        audio = wav[0, 0].numpy()
    return {"prompt_ids": np.array(ids, np.int64), "codes": codes, "stopped": np.array(stopped), "audio": audio,
            "q_slow": np.asarray(q_slow, np.float32), "q_fast": np.asarray(q_fast, np.float32),
            "hidden": np.array(hiddens, np.float32).reshape(len(frames), -1)}


def encode(codec, wav: np.ndarray):
    """dac_encoder.encode_reference_audio_codes at 44.1 kHz: codec.encode -> [frames, 10]."""
    import torch

    x = torch.as_tensor(wav, dtype=torch.float32)[None, None]
    with torch.no_grad():
        codes, _ = codec.encode(x, torch.tensor([x.shape[-1]]))
    return codes[0].transpose(0, 1).to(torch.long).contiguous()


def real_codec_state(mods: dict) -> np.ndarray:
    """`name shape` of every tensor of vLLM-Omni's own build_dac_codec() (the real s2-pro codec), on the meta
    device."""
    import torch

    with torch.device("meta"):
        codec = importlib.import_module("vllm_omni.model_executor.models.fish_speech.dac_utils").build_dac_codec()
    return np.array([f"{k} {list(v.shape)}" for k, v in codec.state_dict().items()])


def main(inputs: dict, wheel: str, checkpoint: str, requests: str) -> dict:
    import torch

    torch.manual_seed(0)
    mods = load(wheel, os.getcwd())
    fast_mod = mods["fish_speech_fast_ar"]
    fast_mod.torch = _Torch(fast_mod.torch)
    mods["fish_speech_slow_ar"].torch = _Torch(mods["fish_speech_slow_ar"].torch)
    root = Path(checkpoint)
    slow, hidden_of, tokenizer = build(mods, root)
    codec, _ = build_codec(mods, root)
    out: dict = {"real_codec_state": real_codec_state(mods)}
    with torch.inference_mode():
        for i, req in enumerate(json.loads(requests)):
            ref_codes = None
            if f"ref_audio_{i}" in inputs:
                ref_codes = encode(codec, inputs[f"ref_audio_{i}"])
                out[f"ref_codes_{i}"] = ref_codes.numpy()
            fed = (inputs[f"q_slow_{i}"], inputs[f"q_fast_{i}"]) if f"q_slow_{i}" in inputs else None
            for k, v in generate(slow, hidden_of, tokenizer, mods, codec, req, fed, ref_codes).items():
                out[f"{k}_{i}"] = v
    return out


if __name__ == "__main__":
    from refenv import serve

    serve(main)
