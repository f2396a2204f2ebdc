"""Gepard-1.0's reference composition, run in the ref5 environment (transformers 5.14.1) through
tests/refenv.py: Hugging Face `Qwen3_5TextModel` built from the checkpoint's own config.json
(AutoConfig) as the backbone, and the rest as vLLM-Omni 0.30.0's `GepardTalkerForConditionalGeneration`
does it in plain torch (its `_build_gather_mask`, `_gumbel_noise`, `_sample_frame`,
`_audio_frame_embed`, the prefill's speaker-slot injection, the stop rule of `forward`) and the prompt
as its `build_gepard_prompt_ids` lays it out over the tokenizer its adapter loads
(AutoTokenizer, `add_special_tokens=False`). The backbone is run on the whole sequence every step
(no cache), so the reference shares nothing with the exported K/V path.

Every tensor of model.safetensors is loaded strictly (the prefixes vLLM-Omni's loader skips for
zero-shot aside: ref_compressor., supcon_head., aligner., mtp., lm_head.).

`python gepard_reference.py IN.npz OUT.npz <checkpoint> <command> [json]`:
- load: the state dict loads strictly; returns the parameter count and the state dict's names.
- backbone: inputs_embeds [B, T, H] -> hidden [B, T, H], logits [B, T, 216], stop_prob [B, T].
- frame_embed: codes [B, 32] -> embeds [B, H].
- generate: a json list of {"text", "seed", "max_new_tokens"} -> for request i: prompt_ids_i,
  codes_i [frames, 32], noise_heads_i [steps, 31, widest], noise0_i [steps, levels of head 0] (the
  Gumbel noise each sampling step drew from the request's generator, the stopping step included),
  stopped_i. Noise fed: when IN.npz holds noise_heads_i and noise0_i (one row per step, at least as
  many as the steps taken), request i's steps take those rows in order instead of drawing from a
  torch generator (its "seed" is then unused) - the Gumbel noise our runtime draws for a seed, so the
  reference makes the frames a served request with that seed must make.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

IGNORED = ("ref_compressor.", "supcon_head.", "aligner.", "mtp.", "lm_head.")


def sidecar(checkpoint: Path) -> dict:
    """The GepardConfig fields the talker reads (its defaults where absent)."""
    sc = json.loads((checkpoint / "gepard_config.json").read_text())
    heads = sc["audio_heads"]
    st, tr = sc.get("special_tokens", {}), sc.get("text_repetition", {})
    comp = (sc.get("voice_cloning") or {}).get("compressor") or {}
    return {
        "levels": [heads[k] for k in sorted(heads, key=lambda s: int(str(s).rsplit("_", 1)[-1]))],
        "embed_dim": sc.get("audio_embed_dim", 32),
        "sot": st.get("start_of_text", 248073), "eot": st.get("end_of_text", 248074),
        "sos": st.get("start_of_speech", 248070), "base": st.get("tokeniser_length", 248077),
        "slots": comp.get("num_queries", 8),
        "rep": (tr.get("enabled", True), tr.get("target_text_tokens", 16), tr.get("apply_below", 13),
                tr.get("max_repeats", 8)),
        "temperature": sc.get("temperature", 0.3), "stop_threshold": sc.get("stop_threshold", 0.5),
    }


def build(checkpoint: Path):
    import torch
    from safetensors.torch import load_file
    from torch import nn
    from transformers import AutoConfig, Qwen3_5TextModel

    cfg = AutoConfig.from_pretrained(str(checkpoint))
    assert type(cfg).__name__ == "Qwen3_5TextConfig", type(cfg)
    cfg._attn_implementation = "eager"
    sc = sidecar(checkpoint)
    h = cfg.hidden_size

    class Talker(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = Qwen3_5TextModel(cfg)
            self.codebook_heads = nn.ModuleList(nn.Linear(h, v) for v in sc["levels"])
            self.stop_head = nn.Linear(h, 1)
            self.audio_embeddings = nn.ModuleList(nn.Embedding(v, sc["embed_dim"]) for v in sc["levels"])
            self.audio_embed_proj = nn.Sequential(nn.Linear(len(sc["levels"]) * sc["embed_dim"], h), nn.GELU(),
                                                  nn.Linear(h, h), nn.LayerNorm(h, elementwise_affine=False))
            self.register_buffer("audio_embed_scale", torch.tensor(1.0))
            self.null_prefix = nn.Parameter(torch.zeros(sc["slots"], h))

    talker = Talker()
    state = {k: v.to(torch.float32) for k, v in load_file(str(checkpoint / "model.safetensors")).items()
             if not k.startswith(IGNORED)}
    state["audio_embed_scale"] = state["audio_embed_scale"].reshape(())
    talker.load_state_dict(state, strict=True)
    return talker.eval(), sc


def gather_mask(levels: list[int]):
    """vLLM-Omni's _build_gather_mask: heads 1..31 padded to the widest, padding -inf."""
    import torch

    width = max(levels[1:])
    rows, masks, cum = [], [], levels[0]
    for v in levels[1:]:
        rows.append(list(range(cum, cum + v)) + [cum] * (width - v))
        masks.append([0.0] * v + [float("-inf")] * (width - v))
        cum += v
    return torch.tensor(rows), torch.tensor(masks, dtype=torch.float32)


def gumbel(ref, gen):
    import torch

    u = torch.stack([torch.rand(ref.shape[1:], generator=gen, device=ref.device, dtype=ref.dtype)])
    return -torch.log(-torch.log(u.clamp_min_(1e-20)))


def prompt_ids(tokenizer, text: str, sc: dict) -> list[int]:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    n = len(ids)
    enabled, target, below, most = sc["rep"]
    repeats = 1 if (not enabled or n >= below or n >= target) else max(1, min(math.ceil(target / n), most))
    block = [sc["sot"], *ids, sc["eot"]]
    return [sc["base"] + i for i in range(sc["slots"])] + block * (repeats - 1) + [*block, sc["sos"]]


def generate(talker, sc: dict, tokenizer, text: str, seed: int, max_tokens: int,
             fed: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """One request; `fed`: (noise_heads [steps, 31, widest], noise0 [steps, levels of head 0]) to take
    in order instead of drawing from the seeded generator."""
    import torch

    levels = sc["levels"]
    gidx, gmask = gather_mask(levels)
    fused_w = torch.cat([m.weight for m in talker.codebook_heads])
    fused_b = torch.cat([m.bias for m in talker.codebook_heads])
    gen = torch.Generator()
    gen.manual_seed(seed)
    ids = torch.tensor(prompt_ids(tokenizer, text, sc))
    embeds = talker.model.embed_tokens(ids)
    spk = (ids >= sc["base"]) & (ids < sc["base"] + sc["slots"])
    embeds[spk] = talker.null_prefix[ids[spk] - sc["base"]]
    seq = embeds[None]
    frames, noise_heads, noise0 = [], [], []
    past_first, stopped = False, False
    for _ in range(max_tokens):
        hidden = talker.model(inputs_embeds=seq, use_cache=False).last_hidden_state[:, -1]
        fused = hidden @ fused_w.T + fused_b
        gathered = fused[:, gidx].float() + gmask
        h0 = fused[:, :levels[0]].float()
        if fed is None:
            gh, g0 = gumbel(gathered, gen), gumbel(h0, gen)  # heads 1..31 first, as _sample_frame
        else:
            step = len(noise_heads)
            gh, g0 = torch.from_numpy(fed[0][step])[None], torch.from_numpy(fed[1][step])[None]
            assert gh.shape == gathered.shape and g0.shape == h0.shape, (gh.shape, g0.shape)
        heads = (gathered / sc["temperature"] + gh).argmax(dim=-1)
        head0 = (h0 / sc["temperature"] + g0).argmax(dim=-1)
        do_stop = bool(torch.sigmoid(talker.stop_head(hidden)).squeeze(-1)[0] > sc["stop_threshold"])
        noise_heads.append(gh[0].numpy())
        noise0.append(g0[0].numpy())
        if do_stop and past_first:
            stopped = True
            break
        codes = torch.cat([head0.clamp(max=levels[0] - 1).unsqueeze(-1), heads], dim=-1)
        frames.append(codes[0].numpy())
        past_first = True
        parts = [talker.audio_embeddings[i](codes[:, i]) for i in range(len(levels))]
        nxt = talker.audio_embed_proj(torch.cat(parts, dim=-1)) * talker.audio_embed_scale
        seq = torch.cat([seq, nxt[:, None]], dim=1)
    return {"prompt_ids": ids.numpy(), "codes": np.array(frames, np.int64).reshape(-1, len(levels)),
            "noise_heads": np.array(noise_heads, np.float32), "noise0": np.array(noise0, np.float32),
            "stopped": np.array(stopped)}


def main(inputs: dict, checkpoint: str, command: str, arg: str = "{}") -> dict:
    import torch

    torch.manual_seed(0)
    root = Path(checkpoint)
    talker, sc = build(root)
    with torch.inference_mode():
        if command == "load":
            return {"parameters": np.array(sum(p.numel() for p in talker.parameters())),
                    "names": np.array(sorted(talker.state_dict()))}
        if command == "backbone":
            x = torch.from_numpy(inputs["inputs_embeds"])
            hidden = talker.model(inputs_embeds=x, use_cache=False).last_hidden_state
            logits = torch.cat([m(hidden) for m in talker.codebook_heads], dim=-1)
            stop = torch.sigmoid(talker.stop_head(hidden))[..., 0]
            return {"hidden": hidden.numpy(), "logits": logits.numpy(), "stop_prob": stop.numpy()}
        if command == "frame_embed":
            codes = torch.from_numpy(inputs["codes"])
            parts = [talker.audio_embeddings[i](codes[:, i]) for i in range(codes.shape[1])]
            return {"embeds": (talker.audio_embed_proj(torch.cat(parts, dim=-1)) * talker.audio_embed_scale).numpy()}
        if command == "generate":
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(checkpoint)
            out: dict = {}
            for i, req in enumerate(json.loads(arg)):
                fed = ((inputs[f"noise_heads_{i}"].astype(np.float32), inputs[f"noise0_{i}"].astype(np.float32))
                       if f"noise_heads_{i}" in inputs else None)
                res = generate(talker, sc, tokenizer, req["text"], int(req["seed"]), int(req["max_new_tokens"]), fed)
                out.update({f"{k}_{i}": v for k, v in res.items()})
            return out
    raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    from refenv import serve

    serve(main)
