"""CosyVoice3's export: `lm_step`, `flow_cond`, `flow_velocity` and `hift` ONNX graphs plus the embedding
tables, each graph checked against the torch modules of export/cosyvoice3/graphs.py while exporting (those
modules are checked against the vLLM-Omni / Qwen2ForCausalLM reference by
tests/export_tests/test_cosyvoice3_parity.py through the whole route).

Stages: lm_step (prefill, then decode steps over the graph's own K/V, each equal to the torch module on
the whole prefix; a ragged two-row batch equal to each row alone), flow_cond (two rows of different
lengths), flow_velocity (without a past: full attention and the 25-token chunk mask, a padded row; stream hops
over a past, frame first, and a context), hift (two lengths, a window seeded mid-run),
tables (text and speech embeddings), manifest.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from export.decoder_step import export_decoder_step
from export.memory import release_memory
from export.quantize import compare_outputs, fp32_int8_int4, quantize_graph, random_step_feeds, snr_db
from export.stages import StageRunner, model_size, save_tables
from export.tracing import (
    export_checked,
)
from ttscore.contract import cosyvoice3 as spec
from ttscore.contract.graphs import GraphSpec
from ttscore.runtime.checkpoint_kit import load_torch_state, read_hyperpyyaml
from ttscore.runtime.families.cosyvoice3.checkpoint import (
    FRONTEND_DIR,
    FRONTEND_MODELS,
    LLM,
    QWEN_DIR,
    YAML,
    CosyVoice3Info,
    read_checkpoint,
)

TOLERANCE = 1e-4  # max abs error of the graphs' float outputs vs the torch modules (tiny: ~1e-6)
LOGITS_TOLERANCE = 1e-3  # logits span tens; relative 1e-5
AUDIO_TOLERANCE = 1e-4


def _lm_stage(src: Path, info: CosyVoice3Info, gspec: GraphSpec, out: Path) -> dict[str, Any]:
    """The Qwen2 LM as a decoder step with an explicit past (export.decoder_step)."""
    from export.cosyvoice3.graphs import LMStep, load

    lm = info.lm
    path, tr = export_decoder_step(lambda: load(LMStep(info), src), gspec, out, layers=lm.layers,
                                   kv_heads=lm.kv_heads, head_dim=lm.head_dim, hidden=lm.hidden, outputs=("logits",))
    return tr.finish(gspec.name, path, {"logits": LOGITS_TOLERANCE})


def _flow_cond_cases(info: CosyVoice3Info) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(4)
    return [{"tokens": rng.integers(0, info.flow.vocab, (b, t)).astype(np.int64),
             "token_len": np.array(lens, np.int64),
             "embedding": rng.standard_normal((b, info.flow.spk_embed_dim)).astype(np.float32)}
            for b, t, lens in ((2, 9, (9, 6)), (1, 30, (30,)))]


def _velocity_cases(info: CosyVoice3Info) -> list[dict[str, np.ndarray]]:
    """flow_velocity's cases (rows, past frames, context, frames, chunks): whole utterances without a past (full
    attention and chunk 8 with a padded row; 60 frames chunk 50), then stream hops: a small chunk over a 16-frame
    past and a short context, and a hop over a 100-frame past with the whole position-conv context (the traced
    one)."""
    rng = np.random.default_rng(5)
    f = info.flow
    m, ctx, big = f.mel, spec.FLOW_CONV_CONTEXT, f.static_chunk_size
    cases: list[dict[str, np.ndarray]] = []
    for b, p, c, n, chunk in ((2, 0, 0, 24, (24, 8)), (1, 0, 0, 60, (big,)), (1, 16, 16, 20, (8,)),
                              (1, 100, ctx, 50, (big,))):
        mask = np.ones((b, n), np.float32)
        if b == 2:
            mask[1, n - 5:] = 0
        case: dict[str, np.ndarray] = {
            "x": rng.standard_normal((b, m, c + n)).astype(np.float32), "mask": mask,
            "mu": rng.standard_normal((b, m, c + n)).astype(np.float32), "t": rng.uniform(0, 1, b).astype(np.float32),
            "spks": rng.standard_normal((b, m)).astype(np.float32),
            "cond": rng.standard_normal((b, m, c + n)).astype(np.float32), "chunk": np.array(chunk, np.int64)}
        for i in range(f.depth):
            for name in (spec.past_key(i), spec.past_value(i)):
                case[name] = rng.standard_normal((p, 2 * b, f.heads, f.dim_head)).astype(np.float32)
        cases.append(case)
    return cases


def _hift_cases(info: CosyVoice3Info) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(6)
    spf, h = info.hift.samples_per_frame, info.hift.nb_harmonics + 1
    return [{"mel": rng.standard_normal((b, info.hift.in_channels, f)).astype(np.float32) * 2 - 3,
             "sine_noise": rng.random((b, f * spf, h)).astype(np.float32),
             "phase0": (rng.random((b, h)) * 30 * (skip[0] > 0)).astype(np.float32), "skip": np.array(skip, np.int64)}
            for b, f, skip in ((1, 12, (0,)), (2, 7, (3, 3)))]


# `--precision int8|int4`: the graphs whose constant-weight MatMuls are quantized (export.quantize.quantize_graph),
# each measured against its fp32 export on random feeds (`vs_fp32`). flow_velocity's error is what HiFT voices,
# so it is held to the vocoder's bar on the audio (`audio`: kept quantized only at VOCODER_MIN_SNR_DB or more,
# else fp32 with the measured SNR in the manifest): its `snr_db` is the worst of its outputs' SNR on the feeds
# and of the audio of a whole 10-step decode through it and the fp32 hift (`audio_snr_db`). flow_cond stays
# fp32 (a few convolutions over the tokens, no MatMul). hift stays fp32: its work is convolutions; its only
# MatMuls are the f0 classifier and the source's harmonic merge (one output each), which would save nothing and
# move f0, whose error the source's running phase integrates over the whole stream (a 0.1% f0 error is 2 cycles
# of drift after 10 s at 200 Hz), which a measurement on short random feeds does not show.
QUANTIZED = ("lm_step", "flow_velocity")


def _decode_audio(info: CosyVoice3Info, flow: Path, hift: Path, case: dict[str, np.ndarray]) -> np.ndarray:
    """The audio of a whole decode (no past) of `case` through the flow graph `flow` (10 Euler steps from its x)
    and the hift graph `hift`, with the sine-noise table."""
    from export.tracing import ort_session
    from ttscore.runtime.families.cosyvoice3.sampling import euler, sine_rows, sine_table

    vel, voc = ort_session(flow), ort_session(hift)

    def velocity(step: int, x: np.ndarray, t: np.ndarray) -> np.ndarray:
        out: np.ndarray = vel.run(["velocity"], {**case, "x": x, "t": t})[0]
        return out

    mel = euler(velocity, case["x"], spec.FLOW_STEPS)
    h, spf = info.hift.nb_harmonics, info.hift.samples_per_frame
    rows = sine_rows(sine_table(info.sample_rate, h), 0, mel.shape[2] * spf)
    pcm: np.ndarray = voc.run(["pcm"], {"mel": mel, "sine_noise": rows[None], "phase0": np.zeros((1, h + 1), np.float32),
                                        "skip": np.zeros(1, np.int64)})[0]
    return pcm


def _quantize(info: CosyVoice3Info, tmp: Path, specs: dict[str, GraphSpec], graph: str, precision: str) -> dict[str, Any]:
    path = tmp / specs[graph].filename
    if graph == "lm_step":
        lm = info.lm
        feeds = random_step_feeds(np.random.default_rng(0), ((1, 0, 6), (3, 4, 1)), hidden=lm.hidden, layers=lm.layers,
                                  kv_heads=lm.kv_heads, head_dim=lm.head_dim)
        return quantize_graph(path, precision, lambda fp32, q: compare_outputs(fp32, q, feeds))
    cases = _velocity_cases(info)[1:]  # one row: a whole utterance, then stream hops over a past
    hift = tmp / specs["hift"].filename

    def measure(fp32: Path, q: Path) -> dict[str, Any]:
        vs = compare_outputs(fp32, q, cases)
        audio = snr_db(_decode_audio(info, fp32, hift, cases[0]), _decode_audio(info, q, hift, cases[0]))
        vs["audio_snr_db"] = audio
        vs["snr_db"] = min(vs["snr_db"], audio)
        return vs

    return quantize_graph(path, precision, measure, audio=True)


def _tables(src: Path, out: Path) -> dict[str, Any]:
    state = load_torch_state(src / LLM)
    return save_tables(out, lambda key: state[key].float(), ((spec.TEXT_EMBEDDING, "llm.model.model.embed_tokens.weight"),
                                                             (spec.SPEECH_EMBEDDING, "speech_embedding.weight")))


def export_cosyvoice3(src: Path, tmp: Path, precision: str, progress: Callable[[int, int, str], None] | None,
                      source: dict[str, Any]) -> dict[str, Any]:
    """Every graph into `tmp`, one stage at a time; returns the manifest."""
    import torch

    from export.cosyvoice3.graphs import FlowCond, FlowVelocity, HiFT, load

    fp32_int8_int4(spec.DISPLAY, precision)
    src = Path(src)
    info = read_checkpoint(src)
    torch.manual_seed(0)
    lm, f = info.lm, info.flow
    specs = {"lm_step": spec.lm_step_spec(lm.layers, lm.hidden, lm.kv_heads, lm.head_dim, lm.speech_rows),
             "flow_cond": spec.flow_cond_spec(f.mel, f.spk_embed_dim),
             "flow_velocity": spec.flow_velocity_spec(f.mel, f.depth, f.heads, f.dim_head),
             "hift": spec.hift_spec(info.hift.in_channels, info.hift.nb_harmonics)}

    def checked(name: str, module: Any, cases: list[dict[str, np.ndarray]], tol: float, example: int = 0) -> None:
        run.reports[name] = export_checked(module, specs[name], cases, tmp, dict.fromkeys(specs[name].output_names, tol),
                                           example)

    with StageRunner(["lm_step", "flow_cond", "flow_velocity", "hift", "tables"], progress, precision,
                     family=spec.FAMILY, source=source) as run:
        run.graph("lm_step", lambda: _lm_stage(src, info, specs["lm_step"], tmp))
        with run.stage("flow_cond"):
            checked("flow_cond", load(FlowCond(info), src), _flow_cond_cases(info), TOLERANCE)
        with run.stage("flow_velocity"):
            checked("flow_velocity", load(FlowVelocity(info), src), _velocity_cases(info), TOLERANCE, example=3)
        release_memory()
        with run.stage("hift"):
            checked("hift", load(HiFT(info), src), _hift_cases(info), AUDIO_TOLERANCE, example=1)
        with run.stage("tables"):
            tables = _tables(src, tmp)
        run.quantize(QUANTIZED, lambda name: _quantize(info, tmp, specs, name, precision))
    shutil.copytree(src / QWEN_DIR, tmp / "tokenizer", ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    # The front-end models, used as shipped (the voice-features model prompt_encoder runs them).
    (tmp / FRONTEND_DIR).mkdir()
    for name in FRONTEND_MODELS:
        shutil.copy2(src / name, tmp / FRONTEND_DIR / name)
    return run.manifest(
        tmp,
        model_size=model_size(lm.hidden, real_width=512),
        sizes=dataclasses.asdict(info),
        sample_rate=info.sample_rate,
        samples_per_frame=info.flow.token_mel_ratio * info.hift.samples_per_frame,
        # A stream's vocoder state lives in the runtime's HopStream (README "Streaming"): the flow's past K/V per
        # solver step, a window of mel and the source phase; none of it crosses the wire.
        vocoder_state_size=1,
        vocoder_state_layout=[["hop_stream", 1]],
        tables=tables,
        graphs=specs,
        configs={YAML: read_hyperpyyaml(src / YAML)},
    )
