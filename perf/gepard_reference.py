"""Gepard-1.0's reference speed: the reference composition of tests/gepard_reference.py (Hugging Face's
`Qwen3_5TextModel` backbone from the checkpoint's config, vLLM-Omni 0.30.0's heads, Gumbel-max sampling, frame
embedding and prompt) generating with the backbone's own K/V cache (`use_cache`, as a PyTorch user runs it; the
parity reference recomputes the whole sequence every step), then NeMo's own NanoCodec decoder
(tests/gepard_nemo_reference.py, from the nemo-toolkit wheel) decoding every frame at the end.

Run in the ref5 environment (transformers 5), by triton_tts/bench/gepard:

    .venv-ref5/bin/python perf/gepard_reference.py CKPT --serve

`--serve`: load once, print `{"ready": true}`, then per stdin line `{"text", "frames"}` generate up to `frames`
frames (seed 0) and decode them, and print `{"frames": made, "seconds": ...}`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import gepard_nemo_reference as nemo_ref  # noqa: E402
import gepard_reference as ref  # noqa: E402

NEMO_WHEEL = ROOT / ".venv-ref5" / "wheels" / "nemo_toolkit-3.0.0-py3-none-any.whl"


def generate(talker: Any, sc: dict[str, Any], tokenizer: Any, text: str, frames: int, seed: int = 0) -> Any:
    """Up to `frames` frames [n, 32] (the stop rule of tests/gepard_reference.generate), the backbone stepping
    over its K/V cache."""
    import torch

    levels = sc["levels"]
    gidx, gmask = ref.gather_mask(levels)
    fused_w = torch.cat([m.weight for m in talker.codebook_heads])
    fused_b = torch.cat([m.bias for m in talker.codebook_heads])
    gen = torch.Generator()
    gen.manual_seed(seed)
    ids = torch.tensor(ref.prompt_ids(tokenizer, text, sc))
    embeds = talker.model.embed_tokens(ids)
    spk = (ids >= sc["base"]) & (ids < sc["base"] + sc["slots"])
    embeds[spk] = talker.null_prefix[ids[spk] - sc["base"]]
    step, past, made = embeds[None], None, []
    for _ in range(frames):
        out = talker.model(inputs_embeds=step, past_key_values=past, use_cache=True)
        past, hidden = out.past_key_values, out.last_hidden_state[:, -1]
        fused = hidden @ fused_w.T + fused_b
        gathered = fused[:, gidx].float() + gmask
        h0 = fused[:, :levels[0]].float()
        gh, g0 = ref.gumbel(gathered, gen), ref.gumbel(h0, gen)
        heads = (gathered / sc["temperature"] + gh).argmax(dim=-1)
        head0 = (h0 / sc["temperature"] + g0).argmax(dim=-1)
        if made and bool(torch.sigmoid(talker.stop_head(hidden)).squeeze(-1)[0] > sc["stop_threshold"]):
            break
        codes = torch.cat([head0.clamp(max=levels[0] - 1).unsqueeze(-1), heads], dim=-1)
        made.append(codes[0])
        parts = [talker.audio_embeddings[i](codes[:, i]) for i in range(len(levels))]
        step = (talker.audio_embed_proj(torch.cat(parts, dim=-1)) * talker.audio_embed_scale)[:, None]
    return torch.stack(made)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--text", default="Streaming speech should start quickly and keep pace with playback.")
    ap.add_argument("--frames", type=int, default=32)
    ap.add_argument("--check", action="store_true",
                    help="print whether the cached generation makes the parity reference's frames (no codec)")
    args = ap.parse_args()

    import torch
    from transformers import AutoTokenizer

    torch.set_num_threads(int(os.environ.get("TTS_ORT_THREADS", "0") or 0) or torch.get_num_threads())
    talker, sc = ref.build(args.checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(str(args.checkpoint))
    if args.check:  # the speed reference is the parity reference's composition: the same frames for a seed
        with torch.inference_mode():
            cached = generate(talker, sc, tokenizer, args.text, args.frames).numpy()
            whole = ref.generate(talker, sc, tokenizer, args.text, 0, args.frames)["codes"]
        print(json.dumps({"frames": [len(cached), len(whole)], "equal": bool(cached.shape == whole.shape
                                                                              and (cached == whole).all())}))
        return 0
    archives = sorted((args.checkpoint / "nanocodec").glob("*.nemo"))
    if not archives:
        raise SystemExit(f"{args.checkpoint}/nanocodec/ holds no .nemo codec")
    decoder, scale, groups = nemo_ref.load_decoder(str(NEMO_WHEEL), tempfile.mkdtemp(prefix="gepard-nemo-"),
                                                   str(archives[0]))

    def run(text: str, frames: int) -> tuple[int, float]:
        t0 = time.perf_counter()
        with torch.inference_mode():
            codes = generate(talker, sc, tokenizer, text, frames).T[None]  # [1, 32, n]
        nemo_ref.decode(decoder, scale, groups, codes)
        return int(codes.shape[2]), time.perf_counter() - t0

    run(args.text, 2)  # warm-up
    if not args.serve:
        made, seconds = run(args.text, args.frames)
        print(json.dumps({"frames": made, "seconds": round(seconds, 3)}))
        return 0
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        made, seconds = run(req["text"], int(req["frames"]))
        print(json.dumps({"frames": made, "seconds": round(seconds, 4)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
