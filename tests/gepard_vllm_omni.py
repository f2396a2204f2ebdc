"""vLLM-Omni 0.30.0's own Gepard code (from the release wheel), run in ref5 without vLLM, to check the
reference composition of tests/gepard_reference.py against it.

`gepard_talker.py` imports vLLM at module level; those names get the smallest stand-ins (none of them
is called here): `vllm.config.VllmConfig`, `vllm.logger.init_logger`,
`vllm.model_executor.models.qwen3_5.Qwen3_5ForCausalLM`, `vllm.model_executor.models.utils`,
`vllm.sequence.IntermediateTensors`, `vllm_omni...output_templates.OmniOutput`,
`vllm_omni.platforms.current_omni_platform`. The real `GepardConfig` parses gepard_config.json, the real
`build_gepard_prompt_ids` lays out the prompt, and a `GepardTalkerForConditionalGeneration` (its
constructor needs a vLLM config and builds vLLM's Qwen3.5, so its head modules are set as the
constructor sets them and the codebook heads fused as its `load_weights` fuses them) samples every
frame with its own `_sample_frame` (the request's seeded torch generator) and embeds it with its own
`_audio_frame_embed`; the backbone is transformers' `Qwen3_5TextModel` (gepard_reference.build).

`python gepard_vllm_omni.py IN.npz OUT.npz <vllm-omni wheel> <checkpoint> <json requests>` ->
prompt_ids_i, codes_i, stopped_i (as gepard_reference.py's generate).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import types
import zipfile
from pathlib import Path

import numpy as np

PACKAGE = "vllm_omni/model_executor/models/gepard"


def _module(name: str, **attrs: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def load(wheel: str, where: str) -> dict[str, types.ModuleType]:
    import importlib

    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith(PACKAGE + "/") and name.endswith(".py"):
                zf.extract(name, where)
    for pkg in ("vllm", "vllm.model_executor", "vllm.model_executor.models", "vllm_omni",
                "vllm_omni.model_executor", "vllm_omni.model_executor.models"):
        _module(pkg, __path__=[])
    _module("vllm.config", VllmConfig=object)
    _module("vllm.logger", init_logger=logging.getLogger)
    _module("vllm.model_executor.models.qwen3_5", Qwen3_5ForCausalLM=object)
    _module("vllm.model_executor.models.utils", AutoWeightsLoader=object, WeightsMapper=object,
            maybe_prefix=lambda prefix, name: f"{prefix}.{name}" if prefix else name)
    _module("vllm.sequence", IntermediateTensors=object)
    _module("vllm_omni.model_executor.models.output_templates", OmniOutput=object)
    _module("vllm_omni.platforms", current_omni_platform=None)
    _module("vllm_omni.model_executor.models.gepard", __path__=[os.path.join(where, PACKAGE)])
    names = ("configuration_gepard", "prompt", "gepard_talker")
    return {n: importlib.import_module(f"vllm_omni.model_executor.models.gepard.{n}") for n in names}


def talker_of(mods: dict, cfg, ref) -> object:
    """A GepardTalkerForConditionalGeneration with the reference's weights in its own head modules."""
    import torch
    from torch import nn

    cls = mods["gepard_talker"].GepardTalkerForConditionalGeneration
    t = cls.__new__(cls)
    nn.Module.__init__(t)
    t.config = cfg
    t._greedy = False
    t.vocab_sizes = list(cfg.audio_head_levels)
    t.num_heads = cfg.num_audio_heads
    t.head0_vocab = cfg.head0_vocab_size
    t.stop_threshold = cfg.stop_threshold
    t.temperature = cfg.temperature
    hidden = ref.null_prefix.shape[1]
    t.fused_codebook_head = nn.Linear(hidden, sum(t.vocab_sizes), bias=True)
    t.fused_codebook_head.weight.data = torch.cat([m.weight for m in ref.codebook_heads])
    t.fused_codebook_head.bias.data = torch.cat([m.bias for m in ref.codebook_heads])
    t.stop_head = ref.stop_head
    t.audio_embeddings = ref.audio_embeddings
    t.audio_embed_proj = ref.audio_embed_proj
    t.register_buffer("audio_embed_scale", ref.audio_embed_scale.clone())
    t.null_prefix = ref.null_prefix
    gather_idx, mask = cls._build_gather_mask(t.vocab_sizes)
    t.register_buffer("_cb_gather_idx", gather_idx, persistent=False)
    t.register_buffer("_cb_mask", mask, persistent=False)
    return t.eval()


def main(inputs: dict, wheel: str, checkpoint: str, requests: str) -> dict:
    import torch
    from gepard_reference import build
    from transformers import AutoTokenizer

    torch.manual_seed(0)
    mods = load(wheel, os.getcwd())  # refenv's temporary working directory
    root = Path(checkpoint)
    cfg = mods["configuration_gepard"].GepardConfig(**json.loads((root / "gepard_config.json").read_text()))
    ref, _ = build(root)
    talker = talker_of(mods, cfg, ref)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    out: dict = {}
    with torch.inference_mode():
        for i, req in enumerate(json.loads(requests)):
            ids = mods["prompt"].build_gepard_prompt_ids(
                tokenizer(req["text"], add_special_tokens=False)["input_ids"], config=cfg)
            gen = torch.Generator()
            gen.manual_seed(int(req["seed"]))
            ids_t = torch.tensor(ids)
            embeds = ref.model.embed_tokens(ids_t)
            base = cfg.speaker_token_base
            spk = (ids_t >= base) & (ids_t < base + cfg.num_speaker_prefix)
            embeds[spk] = talker.null_prefix[ids_t[spk] - base].to(dtype=embeds.dtype)
            seq = embeds[None]
            frames, past_first, stopped = [], False, False
            for _ in range(int(req["max_new_tokens"])):
                hidden = ref.model(inputs_embeds=seq, use_cache=False).last_hidden_state[:, -1]
                head0, heads, want_stop = talker._sample_frame(hidden, [gen])
                if bool(want_stop[0]) and past_first:
                    stopped = True
                    break
                frames.append(torch.cat([head0[:1], heads[0]]).numpy())
                past_first = True
                seq = torch.cat([seq, talker._audio_frame_embed(head0, heads)[:, None]], dim=1)
            out[f"prompt_ids_{i}"] = np.array(ids, np.int64)
            out[f"codes_{i}"] = np.array(frames, np.int64).reshape(-1, cfg.num_audio_heads)
            out[f"stopped_{i}"] = np.array(stopped)
    return out


if __name__ == "__main__":
    from refenv import serve

    serve(main)
