"""Breeze-TTS-2's reference composition, run in the ref5 environment (transformers 5.14.1) through
tests/refenv.py: Hugging Face `T5Gemma2TextEncoder` + `text_encoder_proj`, `Qwen3Model` (no token
embedding: the backbone takes embeddings) + `lm_head`, `LlamaModel` as the depth decoder (its own flat
audio table, `inputs_embeds_projector`, per-codebook heads), greedy decoding as vLLM-Omni 0.30.0's
talker does it (code-0 repetition penalty on the generated history, reserved rows masked, depth
decoder re-run on the whole frame prefix per code), and the prompt made by vLLM-Omni 0.30.0's own
`build_breeze_prompt` (from the release wheel: the default instruction, the reference at the id level,
each text segment through the text encoder on its own).

Every tensor of model.safetensors is loaded strictly (`embed_text_tokens` included, unused as upstream).

`python breeze_tts_2_reference.py IN.npz OUT.npz <checkpoint> <command> [json]`:
- load: the state dict loads strictly; returns the parameter count.
- text_encoder: input_ids [B, T] (+ attention_mask) -> projected states [B, T, H].
- generate: json {"text", "voice", "instructions", "ref_text", "max_new_tokens", "repetition_penalty"}
  (+ ref_codes [T, 16] input, used by requests with a ref_text) -> codes [frames, 16], prompt_ids,
  text_mask; a json list of requests -> the same suffixed _0, _1, ... (one model load for all).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def compose(cfg: dict):
    """The reference modules of a Breeze config (their own init)."""
    import torch
    from torch import nn
    from transformers import LlamaConfig, LlamaModel, Qwen3Config, Qwen3Model
    from transformers.models.t5gemma2.configuration_t5gemma2 import T5Gemma2TextConfig
    from transformers.models.t5gemma2.modeling_t5gemma2 import T5Gemma2TextEncoder

    tc = {k: v for k, v in cfg["text_encoder_config"].items() if k != "model_type"}
    eoi = tc.pop("eoi_token_index", 256000)
    text_config = T5Gemma2TextConfig(**tc)
    text_config._attn_implementation = "eager"
    bc = {k: v for k, v in cfg["backbone_config"].items() if k != "model_type"}
    backbone_config = Qwen3Config(**bc)
    backbone_config._attn_implementation = "eager"
    dc = cfg["depth_decoder_config"]
    depth_config = LlamaConfig(**{**{k: v for k, v in dc.items() if k != "model_type"}, "vocab_size": 1})
    depth_config._attn_implementation = "eager"

    class Depth(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = LlamaModel(depth_config)
            e = dc["audio_embed_size"]
            self.model.embed_tokens = nn.Embedding(dc["num_codebooks"] * dc["vocab_size"], e)
            self.model.inputs_embeds_projector = nn.Linear(e, dc["hidden_size"], bias=False)
            if dc["backbone_hidden_size"] != e:
                self.model.backbone_hidden_state_projector = nn.Linear(dc["backbone_hidden_size"], e, bias=False)
            self.codebooks_head = nn.Module()
            self.codebooks_head.weight = nn.Parameter(torch.zeros(dc["num_codebooks"] - 1, dc["hidden_size"], dc["vocab_size"]))

    class Breeze(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.text_encoder = T5Gemma2TextEncoder(text_config, eoi_token_index=eoi)
            self.text_encoder_proj = nn.Linear(text_config.hidden_size, backbone_config.hidden_size, bias=False)
            self.backbone_model = Qwen3Model(backbone_config)
            self.backbone_model.embed_tokens = None
            self.lm_head = nn.Linear(backbone_config.hidden_size, cfg["vocab_size"] + 1, bias=False)
            self.embed_text_tokens = nn.Embedding(cfg["text_vocab_size"], backbone_config.hidden_size)
            self.depth_decoder = Depth()

    return Breeze()


ALIASES = {"backbone_model.embed_tokens.embed_audio_tokens.weight": "depth_decoder.model.embed_tokens.weight"}
IGNORED = ("codec_model.",)


def build(checkpoint: Path):
    """compose() loaded strictly from model.safetensors (the tied audio table under either name,
    codec_model.* skipped, embed_text_tokens optional as in vLLM-Omni's loader)."""
    from safetensors.torch import load_file

    cfg = json.loads((checkpoint / "config.json").read_text())
    model = compose(cfg)
    weights = {ALIASES.get(k, k): v.float() for k, v in load_file(str(checkpoint / "model.safetensors")).items()
               if not k.startswith(IGNORED)}
    if "embed_text_tokens.weight" not in weights:
        del model.embed_text_tokens
    model.load_state_dict(weights, strict=True)
    return model.eval(), cfg


def encode_text(model, ids, mask):
    import torch

    with torch.no_grad():
        out = model.text_encoder(input_ids=torch.as_tensor(ids), attention_mask=torch.as_tensor(mask))
        return model.text_encoder_proj(out.last_hidden_state)


WHEEL = "vllm_omni-0.30.0-py3-none-any.whl"
VO_PROMPT = "vllm_omni/model_executor/models/breeze_tts_2/prompt.py"


def vllm_omni_prompt_module():
    """vLLM-Omni 0.30.0's own `breeze_tts_2/prompt.py`, read from the release wheel (`make setup` puts it in
    .venv-ref5/wheels/, this environment's prefix; VOXTRAL_VLLM_OMNI_WHEEL overrides) and run without vLLM:
    its vLLM imports get stand-ins (`tokens_input` makes the prompt dict it makes; `AudioResampler` is never
    reached: the reference clips given here are 24 kHz already)."""
    import os
    import sys
    import types
    import zipfile

    wheel = os.environ.get("VOXTRAL_VLLM_OMNI_WHEEL") or str(Path(sys.prefix) / "wheels" / WHEEL)
    with zipfile.ZipFile(wheel) as zf:
        source = zf.read(VO_PROMPT).decode()

    class AudioResampler:
        def __init__(self, **kwargs: object) -> None:
            raise AssertionError("the reference clip must be 24 kHz here")

    stubs = {"vllm": {}, "vllm.inputs": {"TokensPrompt": dict,
                                         "tokens_input": lambda prompt_token_ids: {"prompt_token_ids": list(prompt_token_ids)}},
             "vllm.multimodal": {}, "vllm.multimodal.audio": {"AudioResampler": AudioResampler}}
    for name, attrs in stubs.items():
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod
    module = types.ModuleType("vllm_omni_breeze_prompt")
    exec(compile(source, VO_PROMPT, "exec"), module.__dict__)
    return module


def prompt(checkpoint: Path, cfg: dict, req: dict, ref_codes):
    """(prompt_ids, text_mask, text segment lengths) from vLLM-Omni 0.30.0's `build_breeze_prompt` (the
    adapter's call: the default instruction when the request has none, voice S0 by default): the
    reference segment's ids, one row per reference frame and the EOS frame's row (their ids are the
    config's placeholders), then the target's ids."""
    from transformers import AutoTokenizer

    vo = vllm_omni_prompt_module()
    tok = AutoTokenizer.from_pretrained(str(checkpoint))
    instructions = req.get("instructions")
    reference = None
    if ref_codes is not None:  # a silent clip of as many frames: only its length reaches the prompt
        reference = (np.zeros(len(ref_codes) * vo.ENCODE_DOWNSAMPLE_RATE, np.float32), vo.SAMPLE_RATE)
    built = vo.build_breeze_prompt(tok, req["text"], vo.DEFAULT_INSTRUCTION if instructions is None else instructions,
                                   speaker=req.get("voice") or "S0", ref_audio=reference,
                                   ref_text=req.get("ref_text") if reference is not None else None)
    cond = built["additional_information"]["breeze_prompt"]
    ids: list[int] = []
    mask: list[bool] = []
    lengths: list[int] = []
    if reference is not None:
        assert cond["reference_frames"] == len(ref_codes), (cond["reference_frames"], len(ref_codes))
        ids += list(cond["reference_ids"]) + [cfg["audio_token_id"]] * len(ref_codes) + [cfg["audio_eos_token_id"]]
        mask += [True] * len(cond["reference_ids"]) + [False] * (len(ref_codes) + 1)
        lengths.append(len(cond["reference_ids"]))
    ids += list(cond["target_ids"])
    mask += [True] * len(cond["target_ids"])
    lengths.append(len(cond["target_ids"]))
    assert len(built["prompt_token_ids"]) == len(ids)  # vLLM-Omni's own count of the prompt's rows
    return np.array(ids), np.array(mask), lengths


def generate(model, cfg: dict, prompt_ids, text_mask, lengths, ref_codes, max_new: int, penalty: float):
    import torch
    from transformers import DynamicCache

    vocab, nq = cfg["vocab_size"], cfg["num_codebooks"]
    size = cfg["codec_config"]["codebook_size"]
    table = model.depth_decoder.model.embed_tokens.weight
    offsets = torch.arange(nq) * vocab

    def frame_embed(codes):
        return table[torch.as_tensor(codes).long() + offsets].sum(-2)

    with torch.no_grad():
        ids = torch.as_tensor(prompt_ids)
        tmask = torch.as_tensor(text_mask)
        embeds = torch.zeros(len(ids), cfg["backbone_config"]["hidden_size"])
        text_ids = ids[tmask]
        parts, start = [], 0
        for n in lengths:  # one encoder pass per segment
            seg = text_ids[start:start + n][None]
            parts.append(encode_text(model, seg, torch.ones_like(seg))[0])
            start += n
        embeds[tmask] = torch.cat(parts)
        rows = torch.nonzero(~tmask).flatten()  # the reference's frames, then the all-EOS frame
        if len(rows):
            embeds[rows[:-1]] = frame_embed(np.asarray(ref_codes))
            embeds[rows[-1]] = frame_embed(np.full((1, nq), cfg["codebook_eos_token_id"]))[0]
        cache = DynamicCache(config=model.backbone_model.config)
        out = model.backbone_model(inputs_embeds=embeds[None], past_key_values=cache, use_cache=True)
        hidden = out.last_hidden_state[0, -1]
        frames, history = [], []
        dm = model.depth_decoder.model
        for _ in range(max_new):
            logits = model.lm_head(hidden)[None].float()
            logits[:, size:vocab] = float("-inf")
            if penalty != 1.0 and history:
                h = torch.tensor(history)
                s = logits[0, h]
                logits[0, h] = torch.where(s < 0, s * penalty, s / penalty)
            code0 = int(torch.argmax(logits, -1))
            if code0 == vocab:
                break
            history.append(code0)
            first = hidden if not hasattr(dm, "backbone_hidden_state_projector") else dm.backbone_hidden_state_projector(hidden)
            seq = [first, table[code0]]
            frame = [code0]
            for k in range(nq - 1):
                x = dm.inputs_embeds_projector(torch.stack(seq)[None])
                h = dm(inputs_embeds=x, use_cache=False).last_hidden_state[0, -1]
                lg = h @ model.depth_decoder.codebooks_head.weight[k]
                lg[size:] = float("-inf")
                c = int(torch.argmax(lg))
                frame.append(c)
                seq.append(table[c + (k + 1) * vocab])
            frames.append(frame)
            step = frame_embed(np.array([frame]))
            out = model.backbone_model(inputs_embeds=step[None], past_key_values=cache, use_cache=True)
            hidden = out.last_hidden_state[0, -1]
        return np.array(frames, dtype=np.int64).reshape(-1, nq)


def main(inputs: dict, checkpoint: str, command: str, arg: str = "{}") -> dict:
    import torch

    torch.manual_seed(0)
    root = Path(checkpoint)
    model, cfg = build(root)
    if command == "load":
        return {"parameters": np.array(sum(p.numel() for p in model.state_dict().values())),
                "names": np.array(sorted(model.state_dict()))}
    if command == "text_encoder":
        ids = inputs["input_ids"]
        mask = inputs.get("attention_mask", np.ones_like(ids))
        return {"embeds": encode_text(model, ids, mask).numpy()}
    if command == "generate":  # json: one request, or a list of them (outputs suffixed _<index>)
        reqs = json.loads(arg)
        many = isinstance(reqs, list)
        out = {}
        for i, req in enumerate(reqs if many else [reqs]):
            ref = inputs.get("ref_codes") if req.get("ref_text") else None
            prompt_ids, mask, lengths = prompt(root, cfg, req, ref)
            codes = generate(model, cfg, prompt_ids, mask, lengths, ref, int(req.get("max_new_tokens", 40)),
                             float(req.get("repetition_penalty", 1.1)))
            tag = f"_{i}" if many else ""
            out.update({f"codes{tag}": codes, f"prompt_ids{tag}": prompt_ids, f"text_mask{tag}": mask})
        return out
    raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    from refenv import serve

    serve(main)
