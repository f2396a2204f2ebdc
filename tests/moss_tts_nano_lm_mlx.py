"""MOSS-TTS-Nano's language model in the reference, mlx-audio==0.6.2 (run in .venv-mlx through tests/refenv.py).

`python moss_tts_nano_lm_mlx.py IN.npz OUT.npz MODE CHECKPOINT [JSON]`, MODE:
- `prompt`: JSON {"text"}, inputs `ref_codes` [frames, 16] -> `rows` [T, 17] (Model.build_inference_input_ids,
  voice_clone, the SentencePiece model of the checkpoint loaded by mlx-audio's own loader).
- `generate`: JSON {"do_sample", "max_frames", text/audio knobs}, inputs `rows` [T, 17] and optionally `uniforms`
  -> `frames` [n, 16] (Model.generate_audio_token_ids, KV cache on) and `used` (uniforms consumed). With uniforms,
  mx.random.categorical is replaced by the inverse CDF of softmax(logits) at the next fed uniform (float64
  cumulative sums: the same rule as the project's sampler).
- `hidden`: inputs `rows` -> `hidden` (the global transformer's last position after ln_f) and `text_logits` [2]
  (the local transformer's stop/continue logits of the first frame).
- `foreign`: JSON {"seed", dims...}: writes a checkpoint into CHECKPOINT from mlx-audio's own config classes
  (ModelConfig / GPT2Config, their parameter names and initialisation, saved with mx.save_safetensors), a seed
  chosen so that greedy decoding of `rows` does not stop at frame 0 -> `seed`.
The model loads with `mlx_audio.tts.utils.load_model(CHECKPOINT, strict=True)`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from refenv import serve


def _load(ckpt: str):
    from mlx_audio.tts.utils import load_model

    return load_model(Path(ckpt), strict=True)


def _draw(logits, u: float) -> int:
    s = np.asarray(logits, np.float64)
    p = np.exp(s - np.max(s))
    cdf = np.cumsum(p)
    idx = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return min(idx, int(np.flatnonzero(p > 0)[-1]))


def _generate(model, rows: np.ndarray, args: dict, uniforms: np.ndarray | None) -> dict:
    import mlx.core as mx

    used = [0]
    if uniforms is not None:
        def categorical(logits, axis=-1):
            flat = np.array(logits.astype(mx.float32)).reshape(-1, logits.shape[-1])
            out = []
            for row in flat:
                out.append(_draw(row, float(uniforms[used[0]])))
                used[0] += 1
            return mx.array(out, dtype=mx.int32)

        mx.random.categorical = categorical
    knobs = {k: args[k] for k in ("text_temperature", "text_top_p", "text_top_k", "audio_temperature", "audio_top_p",
                                  "audio_top_k", "audio_repetition_penalty") if k in args}
    frames = model.generate_audio_token_ids(prompt_input_ids=mx.array(rows.astype(np.int32))[None],
                                            max_new_frames=int(args["max_frames"]),
                                            do_sample=bool(args["do_sample"]), **knobs)
    return {"frames": np.array(frames[0]).astype(np.int64).reshape(-1, 16), "used": np.int64(used[0])}


def _hidden(model, rows: np.ndarray) -> dict:
    import mlx.core as mx

    ids = mx.array(rows.astype(np.int32))[None]
    h = model.transformer(inputs_embeds=model._build_inputs_embeds(ids))[:, -1, :]
    local = model.local_transformer(inputs_embeds=h[:, None, :])[:, -1, :]
    text = model._text_lm_head(local)[0]
    cfg = model.config
    return {"hidden": np.array(h[0]),
            "text_logits": np.array(text)[[cfg.audio_assistant_slot_token_id, cfg.audio_end_token_id]]}


def _foreign(ckpt: str, args: dict, rows: np.ndarray) -> dict:
    import dataclasses

    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_audio.tts.models.moss_tts_nano import Model
    from mlx_audio.tts.models.moss_tts_nano.config import GPT2Config, ModelConfig

    out = Path(ckpt)
    c = int(args["codebook_size"])
    gpt2 = GPT2Config(vocab_size=int(args["vocab_size"]), n_embd=int(args["n_embd"]), n_layer=int(args["n_layer"]),
                      n_head=int(args["n_head"]), n_inner=int(args["n_inner"]), rope_base=float(args["rope_base"]),
                      n_positions=4096, n_ctx=4096)
    cfg = ModelConfig(gpt2_config=gpt2, n_vq=16, audio_vocab_size=c, audio_codebook_sizes=[c] * 16,
                      audio_pad_token_id=c, local_transformer_layers=int(args["local_layers"]),
                      hidden_size=gpt2.n_embd, vocab_size=gpt2.vocab_size, max_position_embeddings=4096)
    raw = dataclasses.asdict(cfg)
    raw.pop("model_path", None)
    raw["architectures"] = ["MossTTSNanoForCausalLM"]
    (out / "config.json").write_text(json.dumps(raw, indent=2))
    seed = int(args["seed"])
    for attempt in range(200):
        mx.random.seed(seed + attempt)
        model = Model(cfg)
        mx.eval(model.parameters())
        ids = mx.array(rows.astype(np.int32))[None]
        frames = model.generate_audio_token_ids(prompt_input_ids=ids, max_new_frames=2, do_sample=False)
        if frames.shape[1] == 2:
            break
    else:
        raise RuntimeError("no seed whose greedy decoding runs past frame 0")
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "pt"})
    return {"seed": np.int64(seed + attempt)}


def main(inputs: dict, mode: str, ckpt: str, args_json: str = "{}") -> dict:
    args = json.loads(args_json)
    if mode == "foreign":
        return _foreign(ckpt, args, inputs["rows"])
    model = _load(ckpt)
    if mode == "prompt":
        import mlx.core as mx

        ids, _ = model.build_inference_input_ids(text=args["text"], tokenizer=model.tokenizer, mode="voice_clone",
                                                 prompt_audio_codes=mx.array(inputs["ref_codes"].astype(np.int32)))
        return {"rows": np.array(ids[0]).astype(np.int64)}
    if mode == "generate":
        return _generate(model, inputs["rows"], args, inputs.get("uniforms"))
    if mode == "hidden":
        return _hidden(model, inputs["rows"])
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    serve(main)
    sys.exit(0)
