"""Breeze-TTS-2 checkpoint -> validated ONNX graphs + tables + manifest.json.

Called by export.exporter.export_checkpoint (which owns the partial directory and the rename into
place). Graphs: `text_encoder` (one pass per text segment), `backbone` (Qwen3 step over explicit
K/V + the code-0 head), `depth_decoder` (Llama step over explicit K/V); the codec graphs
(`code2wav_stream`, `code2wav`, `speech_encoder`) are the Qwen3-TTS exporter's, run on the
checkpoint's `audio_tokenizer/`. Each graph is checked against the PyTorch modules of
export/breeze_tts_2/graphs.py (themselves proven equal to the Hugging Face reference classes by
tests/export_tests/test_breeze_tts_2_export.py) through export.tracing.s helpers. Each stage loads only its weights.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from export.memory import release_memory
from export.quantize import compare_outputs, fp32_int8_int4, quantize_graph, random_step_feeds
from export.stages import StageRunner, copy_files, json_configs, model_size, save_tables
from export.tracing import (
    ErrorTracker,
    empty_past,
    export_bound,
    ort_run,
    ort_session,
    torch_threads,
    with_past,
)
from export.weights import CheckpointTensors
from ttscore.contract import breeze_tts_2 as spec
from ttscore.contract.errors import ExportError
from ttscore.contract.graphs import GraphSpec
from ttscore.runtime.families.breeze_tts_2.checkpoint import (
    AUDIO_TABLE,
    TOKENIZER_FILES,
    BreezeInfo,
    read_checkpoint,
    tensor_names,
)

TOLERANCE = 1e-3  # max abs error of any validated output vs the torch modules (tiny measured: ~1e-6)
# `--precision int8|int4`: the graphs whose constant-weight MatMuls are quantized (export.quantize.quantize_graph),
# each measured against its fp32 export (`vs_fp32`); code2wav_stream (the vocoder the runtime runs) keeps its
# quantized form only at VOCODER_MIN_SNR_DB or more. Stay fp32: speech_encoder (its output is argmax codes, which
# a quantized encoder would change for a reference clip: the cloning prompt) and code2wav (the whole-utterance
# decoder, which the runtime does not run; as for Qwen3-TTS).
QUANTIZED = ("text_encoder", "backbone", "depth_decoder", "code2wav_stream")


def graph_specs(info: BreezeInfo) -> dict[str, GraphSpec]:
    b, d = info.backbone, info.depth
    return {
        "text_encoder": spec.text_encoder_spec(b.hidden_size),
        "backbone": spec.backbone_spec(b.num_layers, b.hidden_size, b.num_kv_heads, b.head_dim, info.codebook_vocab + 1),
        "depth_decoder": spec.depth_spec(d.num_layers, info.audio_embed_size, d.hidden_size, d.num_kv_heads, d.head_dim),
    }


class _LogitsTracker(ErrorTracker):
    """Masked logits are -inf on both sides: compared with those rows replaced by a finite floor (a
    row -inf on one side only is an error of 1e9)."""

    def add(self, name: str, got: Any, want: Any, case: str) -> float:
        floor = np.float32(-1e9)
        return super().add(name, np.maximum(np.asarray(got), floor), np.maximum(np.asarray(want), floor), case)


def _text_stage(w: CheckpointTensors, info: BreezeInfo, gspec: GraphSpec, out: Path) -> dict[str, Any]:
    import torch

    from .graphs import TEXT_NAMES, TextEncoder, checkpoint_name

    g = torch.Generator().manual_seed(2)
    vocab = info.text.vocab_size
    cases: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []
    with torch_threads(), torch.inference_mode():
        model = TextEncoder(info).eval()
        w.load(model, lambda p: checkpoint_name(p, TEXT_NAMES))
        long = max(3, info.text.sliding_window + 3)  # past the sliding window on both sides
        for t_len in (1, 4, long):
            ids = torch.randint(0, vocab, (1, t_len), generator=g)
            ids[0, 0] = 2
            mask = torch.ones_like(ids)
            cases.append((f"T={t_len}", ids.numpy(), mask.numpy(), model(ids, mask).numpy()))
        ids = torch.randint(0, vocab, (2, 6), generator=g)
        mask = torch.ones_like(ids)
        mask[1, 4:] = 0
        want = model(ids, mask).numpy()
        solo = model(ids[1:, :4], mask[1:, :4]).numpy()
        path = export_bound(model, (ids, mask), gspec, out)
        del model
    release_memory()
    sess = ort_session(path)
    tr = ErrorTracker()
    for case, ids_np, mask_np, want_np in cases:
        tr.add("embeds", ort_run(sess, {"input_ids": ids_np, "attention_mask": mask_np})[0], want_np, case)
    got = ort_run(sess, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    tr.add("embeds", got, want, "padded batch")
    tr.add("embeds", got[1:, :4], solo, "padded row == alone")
    return tr.finish(gspec.name, path, TOLERANCE)


def _stack_stage(w: CheckpointTensors, info: BreezeInfo, gspec: GraphSpec, out: Path, which: str) -> dict[str, Any]:
    """Backbone or depth decoder: prefill + decode over the graph's own K/V equal the torch module
    run on the whole sequence at once; a ragged batch (backbone) equals each row alone."""
    import torch

    from .graphs import BACKBONE_NAMES, DEPTH_NAMES, BackboneStep, DepthStep, checkpoint_name

    backbone = which == "backbone"
    s = info.backbone if backbone else info.depth
    dim = s.hidden_size if backbone else info.audio_embed_size
    layers, kvh, hd = s.num_layers, s.num_kv_heads, s.head_dim
    g = torch.Generator().manual_seed(3)
    n_total, n_prefill = (9, 6) if backbone else (16, 2)
    x = torch.randn(1, n_total, dim, generator=g)

    def call(model: Any, xs: torch.Tensor, past: list[torch.Tensor], start: int) -> tuple[torch.Tensor, ...]:
        pos = torch.arange(start, start + xs.shape[1])[None]
        if backbone:
            mask = torch.ones(1, start + xs.shape[1], dtype=torch.int64)
            return tuple(model(xs, mask, pos, *past))
        return tuple(model(xs, pos, *past))

    with torch_threads(), torch.inference_mode():
        model = (BackboneStep(info) if backbone else DepthStep(info)).eval()
        w.load(model, lambda p: checkpoint_name(p, BACKBONE_NAMES if backbone else DEPTH_NAMES))
        if not backbone:
            pass
        whole = call(model, x, [torch.zeros(1, kvh, 0, hd) for _ in range(2 * layers)], 0)
        want_hidden = whole[0].numpy()
        # The code-0 logits of every position (the graph gives the last one of each call).
        want_logits = [call(model, x[:, :n], [torch.zeros(1, kvh, 0, hd) for _ in range(2 * layers)], 0)[1].numpy()
                       for n in range(n_prefill, n_total + 1)] if backbone else []
        past = [torch.randn(1, kvh, 2, hd, generator=g) for _ in range(2 * layers)]
        ex = (torch.randn(1, 3, dim, generator=g), torch.ones(1, 5, dtype=torch.int64), torch.arange(2, 5)[None], *past)
        if not backbone:
            ex = (ex[0], ex[2], *past)
        path = export_bound(model, ex, gspec, out)
        del model
    release_memory()
    sess = ort_session(path)
    tr = _LogitsTracker()
    xn = x.numpy()

    def feeds(xs: np.ndarray, past: list[np.ndarray], start: int) -> dict[str, np.ndarray]:
        f: dict[str, np.ndarray] = {"inputs_embeds": xs,
                                    "position_ids": np.arange(start, start + xs.shape[1], dtype=np.int64)[None]}
        if backbone:
            f["attention_mask"] = np.ones((xs.shape[0], start + xs.shape[1]), np.int64)
        return with_past(f, past)

    got = ort_run(sess, feeds(xn[:, :n_prefill], empty_past(layers, kvh, hd), 0))
    tr.add("hidden", got[0], want_hidden[:, :n_prefill], "prefill")
    k = 2 if backbone else 1
    if backbone:
        tr.add("logits", got[1], want_logits[0], "prefill")
    past_np = list(got[k:])
    for p in range(n_prefill, n_total):
        step = ort_run(sess, feeds(xn[:, p:p + 1], past_np, p))
        tr.add("hidden", step[0], want_hidden[:, p:p + 1], f"decode past={p}")
        if backbone:
            tr.add("logits", step[1], want_logits[p - n_prefill + 1], f"decode past={p}")
        past_np = [np.concatenate([a, b], axis=2) for a, b in zip(past_np, step[k:], strict=True)]
    if backbone:  # ragged batch: row 0 has 4 past + 2 new, row 1 has 2 past + 1 new (left-padded)
        rows = ((4, 2), (2, 1))
        pmax, tmax = 4, 2
        bf: dict[str, np.ndarray] = {"inputs_embeds": np.zeros((2, tmax, dim), np.float32),
                                     "attention_mask": np.zeros((2, pmax + tmax), np.int64),
                                     "position_ids": np.zeros((2, tmax), np.int64)}
        pasts = [np.zeros((2, kvh, pmax, hd), np.float32) for _ in range(2 * layers)]
        for r, (n_past, n_new) in enumerate(rows):
            kv = ort_run(sess, feeds(xn[:, :n_past], empty_past(layers, kvh, hd), 0))[k:]
            for j in range(2 * layers):
                pasts[j][r, :, pmax - n_past:] = kv[j][0]
            lead = tmax - n_new
            bf["inputs_embeds"][r, lead:] = xn[0, n_past:n_past + n_new]
            bf["attention_mask"][r, pmax - n_past:pmax] = 1
            bf["attention_mask"][r, pmax + lead:] = 1
            bf["position_ids"][r, lead:] = n_past + np.arange(n_new)
        batched = ort_run(sess, with_past(bf, pasts))
        for r, (n_past, n_new) in enumerate(rows):
            tr.add("hidden", batched[0][r, tmax - n_new:], want_hidden[0, n_past:n_past + n_new], f"batched row {r}")
            tr.add("logits", batched[1][r], want_logits[n_past + n_new - n_prefill][0]
                   if n_past + n_new >= n_prefill else batched[1][r], f"batched row {r}")
    del sess
    return tr.finish(gspec.name, path, TOLERANCE)


def _tables_stage(w: CheckpointTensors, info: BreezeInfo, out: Path) -> dict[str, Any]:
    names = [(spec.AUDIO_EMBEDDINGS, AUDIO_TABLE), (spec.DEPTH_HEADS, "depth_decoder.codebooks_head.weight")]
    if info.backbone.hidden_size != info.audio_embed_size:
        names.append((spec.HIDDEN_PROJECTOR, "depth_decoder.model.backbone_hidden_state_projector.weight"))
    return save_tables(out, w.get, names)


def _codec_stage(src: Path, out: Path) -> dict[str, Any]:
    import torch

    from export.qwen3_tts.code2wav import export_code2wav
    from export.qwen3_tts.encoders import export_speech_encoder
    from export.qwen3_tts.reference import reference_imports

    with reference_imports():
        from qwen_tts import Qwen3TTSTokenizer
    tok = Qwen3TTSTokenizer.from_pretrained(str(src / spec.AUDIO_TOKENIZER_DIR), dtype=torch.float32, device_map="cpu")
    tok.model.eval()
    c2w = export_code2wav(tok.model, out)
    enc = export_speech_encoder(tok.model, out)
    return {"code2wav": c2w, "speech_encoder": enc}


def _quant_feeds(info: BreezeInfo, graph: str, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Random inputs for comparing a quantized graph with its fp32 form (code2wav_stream: the Qwen3-TTS
    exporter's streamed comparison)."""
    rng = np.random.default_rng(seed)
    if graph == "text_encoder":
        feeds = []
        for rows, t in ((1, 12), (2, 6)):
            mask = np.ones((rows, t), np.int64)
            mask[1:, t - 2:] = 0  # a padded row
            feeds.append({"input_ids": rng.integers(0, info.text.vocab_size, (rows, t)).astype(np.int64),
                          "attention_mask": mask})
        return feeds
    if graph == "backbone":
        s = info.backbone
        return random_step_feeds(rng, ((1, 0, 6), (3, 4, 1)), hidden=s.hidden_size, layers=s.num_layers,
                                 kv_heads=s.num_kv_heads, head_dim=s.head_dim)
    d = info.depth
    return random_step_feeds(rng, ((1, 0, 2), (3, 4, 1)), hidden=info.audio_embed_size, layers=d.num_layers,
                             kv_heads=d.num_kv_heads, head_dim=d.head_dim, mask=False)


def _quantize(info: BreezeInfo, path: Path, graph: str, precision: str) -> dict[str, Any]:
    if graph == "code2wav_stream":
        from export.qwen3_tts.exporter import compare_vocoder

        return quantize_graph(path, precision, compare_vocoder, audio=True)
    feeds = _quant_feeds(info, graph)
    return quantize_graph(path, precision, lambda fp32, q: compare_outputs(fp32, q, feeds))


def export_breeze(src: Path, tmp: Path, precision: str, progress: Callable[[int, int, str], None] | None,
                  source: dict[str, Any]) -> dict[str, Any]:
    """Every graph into `tmp`, one stage at a time; returns the manifest."""
    import torch

    from ttscore.contract.qwen3_tts import code2wav_spec, code2wav_stream_spec, speech_encoder_spec

    fp32_int8_int4(spec.RULES.name, precision)
    info = read_checkpoint(src)
    torch.manual_seed(0)
    specs = graph_specs(info)
    cfg = json.loads((src / "config.json").read_text(encoding="utf-8"))
    weights = CheckpointTensors(src, stored=tensor_names(src, cfg))  # our name -> stored name (strict check)
    with StageRunner(["text encoder", "backbone", "depth decoder", "tables", "codec"], progress, precision,
                     family=spec.FAMILY, source=source) as run:
        run.graph("text encoder", lambda: _text_stage(weights, info, specs["text_encoder"], tmp))
        run.graph("backbone", lambda: _stack_stage(weights, info, specs["backbone"], tmp, "backbone"))
        run.graph("depth decoder", lambda: _stack_stage(weights, info, specs["depth_decoder"], tmp, "depth"))
        with run.stage("tables"):
            tables = _tables_stage(weights, info, tmp)
        with run.stage("codec"):
            codec = _codec_stage(src, tmp)
            c2w = codec["code2wav"]
            if int(c2w["samples_per_frame"]) != spec.SAMPLES_PER_FRAME or int(c2w["num_groups"]) != info.num_codebooks:
                raise ExportError(f"{src}/{spec.AUDIO_TOKENIZER_DIR} is not a 16-codebook 1920-hop Qwen3-TTS 12 Hz "
                                  "tokenizer")
            # One report validates both vocoder graphs (quantizing code2wav_stream adds to a copy of it).
            run.reports["code2wav_stream"] = run.reports["code2wav"] = c2w
            run.reports["speech_encoder"] = codec["speech_encoder"]
            specs["code2wav_stream"] = code2wav_stream_spec(info.num_codebooks, int(c2w["state_size"]),
                                                            spec.SAMPLES_PER_FRAME)
            specs["code2wav"] = code2wav_spec(info.num_codebooks)
            specs["speech_encoder"] = speech_encoder_spec(info.num_codebooks)
        run.quantize(QUANTIZED, lambda name: _quantize(info, tmp / specs[name].filename, name, precision))
    copy_files(src, tmp / "tokenizer", TOKENIZER_FILES)
    return run.manifest(
        tmp,
        model_size=model_size(info.backbone.hidden_size),
        sizes=info.to_json(),
        sample_rate=info.sample_rate,
        samples_per_frame=spec.SAMPLES_PER_FRAME,
        vocoder_state_size=int(c2w["state_size"]),
        vocoder_state_layout=c2w["state_layout"],
        speakers={v: i for i, v in enumerate(spec.VOICES)},
        tables=tables,
        graphs=specs,
        configs=json_configs(src, "config.json", f"{spec.AUDIO_TOKENIZER_DIR}/config.json"),
    )
