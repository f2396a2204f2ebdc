"""VoxCPM2 checkpoint -> validated ONNX graphs + text embedding table + manifest.json.

Called (through export/voxcpm2/family.py) by export.exporter.export_checkpoint, which owns the
partial directory and the rename into place, when the checkpoint's config.json is a VoxCPM2 config.
Each graph is traced from the wrappers in export/voxcpm2/graphs.py (export.tracing.export_bound, or
export_inline for the AudioVAE) with the legacy TorchScript exporter and checked in ONNX
Runtime against the reference's own modules (not the wrappers) over several shapes per dynamic
axis; the LocDiT step graph is checked together with the runtime's numpy Euler solver against the
reference `UnifiedCFM.forward` with the same noise. Any error above tolerance is an ExportError.

Memory is bounded as for Qwen3-TTS (export/weights.py, export/memory.py): the reference is built
on the meta device (reference.StagedVoxCPM2) and each stage loads only the weights it traces, one
tensor at a time; the reference outputs are computed first, the graph is traced without its
parameters and the weights bound one at a time into `<graph>.onnx.data` (bind_weights), and the
weights go back to the meta device before ONNX Runtime loads the graph for validation. Each
stage's peak RSS goes into the manifest (`export.stages`). The AudioVAE graphs (0.09 B
parameters, weight norm folded) are still traced with their weights inline.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from export.memory import release_memory
from export.quantize import compare_outputs, quantize_graph, random_step_feeds, snr_db
from export.stages import StageRunner, copy_files, json_configs, model_size
from export.tracing import (
    ErrorTracker,
    check,
    empty_past,
    export_bound,
    export_inline,
    file_size,
    max_abs,
    ort_run,
    ort_session,
    run_in_chunks,
    torch_threads,
    with_past,
)
from ttscore.contract import voxcpm2 as spec
from ttscore.contract.graphs import GraphSpec
from ttscore.runtime.families.voxcpm2.checkpoint import TOKENIZER_FILES, VoxCPM2Info
from ttscore.runtime.families.voxcpm2.solver import SolveRow, solve

TOLERANCE = 1e-3  # max abs error of any validated output (tiny measured: <= ~3e-6)
TEXT_TABLE = "text_embeddings"
# `--precision int8|int4`: the graphs whose constant-weight MatMuls are quantized (export.quantize.
# quantize_graph, as for Qwen3-TTS), each measured against its fp32 export (`validation.vs_fp32`).
# The AudioVAE decoder is offered too under the vocoder rule (kept only at >= VOCODER_MIN_SNR_DB);
# it is all convolutions, so it stays fp32. bridge and heads (a few small projections, the stop
# head) and the AudioVAE encoder (reference audio only) stay fp32.
# Slots of garbage the LM validation adds beyond the mask's past (the graphs cut their past to the mask).
CAPACITY_EXTRA = 3
QUANTIZED_GRAPHS = ("base_lm", "residual_lm", "local_encoder", "locdit_step", "vae_decoder_stream")


def graph_specs(info: VoxCPM2Info, state_size: int) -> dict[str, GraphSpec]:
    lm, res = info.lm, info.residual
    return {
        "base_lm": spec.lm_spec("base_lm", lm.num_layers, lm.hidden_size, lm.num_kv_heads, lm.head_dim, lm.rope),
        "residual_lm": spec.lm_spec("residual_lm", res.num_layers, res.hidden_size, res.num_kv_heads, res.head_dim,
                                    res.rope),
        "local_encoder": spec.local_encoder_spec(info.patch_size, info.feat_dim, lm.hidden_size),
        "bridge": spec.bridge_spec(lm.hidden_size),
        "heads": spec.heads_spec(lm.hidden_size, info.dit.hidden_size),
        "locdit_step": spec.locdit_spec(info.patch_size, info.feat_dim, info.dit.hidden_size),
        "vae_encoder": spec.vae_encoder_spec(info.feat_dim),
        "vae_decoder_stream": spec.vae_decoder_spec(info.feat_dim, state_size),
    }


def _finish(tracker: ErrorTracker, name: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every output within TOLERANCE of the reference (ErrorTracker.enforce), and the report."""
    tracker.enforce(TOLERANCE, name)
    return {"max_abs_error": tracker.report(), "tolerance": TOLERANCE, **(extra or {})}


def _over_capacity(sess: Any, name: str, feeds: dict[str, np.ndarray], past: list[np.ndarray],
                   garbage: np.random.Generator, case: str) -> list[np.ndarray]:
    """An LM step's outputs over `past` grown by CAPACITY_EXTRA slots of garbage beyond the mask (the runtime's
    arena rows at their capacity); ExportError unless they are the bits of the step over `past` itself (the graph
    cuts its past to the mask: `past_cut_to_mask`, ttscore.contract.kv)."""
    grown = [np.concatenate([a, garbage.standard_normal((*a.shape[:2], CAPACITY_EXTRA, a.shape[3]), np.float32)],
                            axis=2) for a in past]
    cut = ort_run(sess, with_past(feeds, past))
    got = ort_run(sess, with_past(feeds, grown))
    check(all(np.array_equal(a, b) for a, b in zip(got, cut, strict=True)),
          f"{name}: a past longer than the mask changed the output ({case}): the graph must cut it")
    return got


def _lm_stage(ref: Any, attr: str, gspec: GraphSpec, out: Path) -> dict[str, Any]:
    """Base or residual LM: the reference's outputs first, then the trace, then (weights freed) ORT."""
    import torch

    from .graphs import LMStep

    exclude = ("base_lm.embed_tokens.",)  # the text table is its own stage
    with ref.loaded((f"{attr}.",), exclude) as model, torch_threads(), torch.inference_mode():
        stack = getattr(model, attr)
        hidden = stack.config.hidden_size
        layers = len(stack.layers)
        kvh = stack.config.num_key_value_heads
        hd = stack.config.kv_channels or hidden // stack.config.num_attention_heads
        g = torch.Generator().manual_seed(1)
        prefills: list[tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray]]]] = []
        for t_len in (1, 6, 11):
            x = torch.randn(1, t_len, hidden, generator=g)
            ref_h, ref_kv = stack(x, is_causal=True)
            # Two decode steps against the reference's static-cache forward_step.
            stack.kv_cache.fill_caches(ref_kv)
            steps = []
            for _ in range(2):
                x1 = torch.randn(1, hidden, generator=g)
                want = stack.forward_step(x1, torch.tensor([stack.kv_cache.step()]))
                steps.append((x1.numpy().copy(), want.numpy().copy()))
            prefills.append((x.numpy(), ref_h.numpy(), np.stack([t.numpy() for kv in ref_kv for t in kv]), steps))
        # A padded batch (ragged past, left-padded new tokens) equals each row alone.
        rows: list[tuple[np.ndarray, np.ndarray, int, int]] = []
        for n_past, n_new in ((3, 2), (1, 1)):
            xt = torch.randn(1, n_past + n_new, hidden, generator=g)
            ref_h, _ = stack(xt, is_causal=True)
            rows.append((xt.numpy(), ref_h.numpy(), n_past, n_new))
        stack.kv_cache.current_length = 0
        ex = (torch.randn(1, 3, hidden, generator=g), torch.ones(1, 5, dtype=torch.long), torch.arange(2, 5)[None],
              *[torch.randn(1, kvh, 2, hd, generator=g) for _ in range(2 * layers)])
        if "position_ids" not in gspec.input_names:  # no RoPE: the wrapper ignores them, the graph has none
            ex = (ex[0], ex[1], *ex[3:])
        wrapper = LMStep(stack).eval()
        path = export_bound(wrapper, ex, gspec, out)
        del wrapper, stack, model
    # The PyTorch weights are back on the meta device before ONNX Runtime loads the graph.
    release_memory()
    sess = ort_session(path)
    tr = ErrorTracker()
    garbage = np.random.default_rng(0)
    feeds: dict[str, np.ndarray]
    for x_np, h_np, kv_np, steps in prefills:
        t_len = x_np.shape[1]
        feeds = {"inputs_embeds": x_np, "attention_mask": np.ones((1, t_len), np.int64),
                 "position_ids": np.arange(t_len, dtype=np.int64)[None]}
        got = ort_run(sess, with_past(feeds, empty_past(layers, kvh, hd)))
        case = f"prefill T={t_len}"
        tr.add("hidden", got[0], h_np, case)
        tr.add("new_kv", np.stack(got[1:]), kv_np, case)
        past = list(got[1:])
        for s, (x1_np, want_np) in enumerate(steps):
            p = t_len + s
            feeds = {"inputs_embeds": x1_np[:, None], "attention_mask": np.ones((1, p + 1), np.int64),
                     "position_ids": np.array([[p]], np.int64)}
            step = _over_capacity(sess, gspec.name, feeds, past, garbage, f"decode past={p}")
            tr.add("hidden", step[0][:, 0], want_np, f"decode past={p} capacity={p + CAPACITY_EXTRA}")
            past = [np.concatenate([a, b], axis=2) for a, b in zip(past, step[1:], strict=True)]
    pmax, tmax = max(r[2] for r in rows), max(r[3] for r in rows)
    feeds = {"inputs_embeds": np.zeros((2, tmax, hidden), np.float32),
             "attention_mask": np.zeros((2, pmax + tmax), np.int64), "position_ids": np.zeros((2, tmax), np.int64)}
    pasts = [np.zeros((2, kvh, pmax, hd), np.float32) for _ in range(2 * layers)]
    for r, (xa, _, n_past, n_new) in enumerate(rows):
        pre: dict[str, np.ndarray] = {"inputs_embeds": xa[:, :n_past], "attention_mask": np.ones((1, n_past), np.int64),
                                      "position_ids": np.arange(n_past, dtype=np.int64)[None]}
        kv = ort_run(sess, with_past(pre, empty_past(layers, kvh, hd)))[1:]
        for j in range(2 * layers):
            pasts[j][r, :, :n_past] = kv[j][0]
        lead = tmax - n_new
        feeds["inputs_embeds"][r, lead:] = xa[0, n_past:]
        feeds["attention_mask"][r, :n_past] = 1
        feeds["attention_mask"][r, pmax + lead:] = 1
        feeds["position_ids"][r, lead:] = n_past + np.arange(n_new)
    batched = _over_capacity(sess, gspec.name, feeds, pasts, garbage, "batched")[0]
    for r, (_, want_h, n_past, n_new) in enumerate(rows):
        tr.add("hidden", batched[r, tmax - n_new:], want_h[0, n_past:], f"batched row {r} capacity={pmax + CAPACITY_EXTRA}")
    del sess
    return _finish(tr, gspec.name, {"bytes": file_size(path)})


SMALL_WEIGHTS = ("feat_encoder.", "enc_to_lm_proj.", "fsq_layer.", "fusion_concat_proj.", "lm_to_dit_proj.",
                 "res_to_dit_proj.", "stop_proj.", "stop_head.", "base_lm.embed_tokens.")


def _small_stages(ref: Any, info: VoxCPM2Info, specs: dict[str, GraphSpec], out: Path) -> dict[str, Any]:
    """Local encoder, bridge, heads and the text embedding table."""
    import torch

    from .graphs import Bridge, Heads, LocalEncoder

    g = torch.Generator().manual_seed(2)
    h = info.lm.hidden_size
    enc_cases, bridge_cases, head_cases = [], [], []
    with ref.loaded(SMALL_WEIGHTS) as model, torch_threads(), torch.inference_mode():
        for n in (1, 5):
            f = torch.randn(n, info.patch_size, info.feat_dim, generator=g)
            want = model.enc_to_lm_proj(model.feat_encoder(f.unsqueeze(1)))[:, 0]
            enc_cases.append((n, {"feats": f.numpy()}, [want.numpy()]))
        for n in (1, 7):
            lm_out, emb = torch.randn(n, h, generator=g) * 3, torch.randn(n, h, generator=g)
            mask = torch.rand(n, generator=g) > 0.5
            fm = mask.float().unsqueeze(-1)
            lm_hidden = model.fsq_layer(lm_out) * fm + lm_out * (1 - fm)
            res_in = model.fusion_concat_proj(torch.cat([lm_hidden, fm * emb], dim=-1))
            bridge_cases.append((n, {"lm_out": lm_out.numpy(), "feat_embeds": emb.numpy(), "audio_mask": mask.numpy()},
                                 [lm_hidden.numpy(), res_in.numpy()]))
        for n in (1, 4):
            a, b = torch.randn(n, h, generator=g), torch.randn(n, h, generator=g)
            mu = torch.cat([model.lm_to_dit_proj(a), model.res_to_dit_proj(b)], dim=-1)
            stop = model.stop_head(model.stop_actn(model.stop_proj(a)))
            head_cases.append((n, {"lm_hidden": a.numpy(), "residual_hidden": b.numpy()}, [mu.numpy(), stop.numpy()]))
        paths = {
            "local_encoder": export_bound(LocalEncoder(model).eval(), (torch.randn(2, info.patch_size, info.feat_dim),),
                                    specs["local_encoder"], out),
            "bridge": export_bound(Bridge(model).eval(), (torch.randn(3, h), torch.randn(3, h),
                                                    torch.tensor([True, False, True])), specs["bridge"], out),
            "heads": export_bound(Heads(model).eval(), (torch.randn(2, h), torch.randn(2, h)), specs["heads"], out),
        }
        table = np.lib.format.open_memmap(tmp_table := out / f"{TEXT_TABLE}.npy", mode="w+", dtype=np.float32,
                                          shape=(info.vocab_size, h))
        weight = model.base_lm.embed_tokens.weight
        for start in range(0, info.vocab_size, 8192):
            table[start:start + 8192] = (weight[start:start + 8192].float() * info.scale_emb).numpy()
        table.flush()
        del table, weight, model
    release_memory()
    check(tmp_table.stat().st_size > 0, "text table not written")
    reports: dict[str, Any] = {}
    for name, cases, outs in (("local_encoder", enc_cases, ("embeds",)), ("bridge", bridge_cases,
                              ("lm_hidden", "residual_input")), ("heads", head_cases, ("mu", "stop_logits"))):
        sess, tr = ort_session(paths[name]), ErrorTracker()
        for n, feeds, wants in cases:
            got = ort_run(sess, feeds)
            for o, gv, wv in zip(outs, got, wants, strict=True):
                tr.add(o, gv, wv, f"n={n}")
        reports[name] = _finish(tr, name, {"bytes": file_size(paths[name])})
        del sess
    return reports


def _locdit_stage(ref: Any, info: VoxCPM2Info, gspec: GraphSpec, out: Path) -> dict[str, Any]:
    import torch

    from .graphs import LocDiTStep
    from .reference import fed_noise

    d, p, m = info.feat_dim, info.patch_size, 2 * info.dit.hidden_size
    rng = np.random.default_rng(3)
    cases = []
    with ref.loaded(("feat_decoder.",)) as model, torch_threads(), torch.inference_mode():
        for n_steps, cfg, batch in ((10, 2.0, 1), (4, 1.5, 3), (25, 3.0, 2)):
            noise = rng.standard_normal((batch, d, p)).astype(np.float32)
            mu = rng.standard_normal((batch, m)).astype(np.float32)
            cond = rng.standard_normal((batch, d, p)).astype(np.float32)
            with fed_noise(iter([noise])):
                want = model.feat_decoder(mu=torch.from_numpy(mu), n_timesteps=n_steps, patch_size=p,
                                          cond=torch.from_numpy(cond), cfg_value=cfg).numpy()
            cases.append((noise, mu, cond, n_steps, cfg, batch, want))
        ex = (torch.randn(2, d, p), torch.randn(2, m), torch.randn(2, d, p), torch.rand(2), torch.zeros(2),
              torch.full((2,), 2.0))
        path = export_bound(LocDiTStep(model).eval(), ex, gspec, out)
        del model
    release_memory()
    sess = ort_session(path)

    def run(x: Any, mu: Any, cond: Any, t: Any, dt: Any, cfg: Any) -> Any:
        return ort_run(sess, {"x": x, "mu": mu, "cond": cond, "t": t, "dt": dt, "cfg_value": cfg})[0]

    tr = ErrorTracker()
    for noise, mu, cond, n_steps, cfg, batch, want in cases:
        rows = [SolveRow(noise[i], mu[i], cond[i], n_steps, cfg) for i in range(batch)]
        got = np.stack(solve(rows, run, mean_mode=info.mean_mode))
        tr.add("patch", got, want, f"steps={n_steps} cfg={cfg} batch={batch}")
    # Rows with different step counts in one solve equal each row solved alone.
    rows = [SolveRow(rng.standard_normal((d, p)).astype(np.float32), rng.standard_normal(m).astype(np.float32),
                     rng.standard_normal((d, p)).astype(np.float32), n, 2.0) for n in (10, 3)]
    mixed = solve(rows, run, mean_mode=info.mean_mode)
    for i, row in enumerate(rows):
        tr.add("patch", mixed[i], solve([row], run, mean_mode=info.mean_mode)[0], f"mixed steps row {i}")
    return _finish(tr, "locdit_step", {"validated_with": "ttscore.runtime.families.voxcpm2.solver.solve",
                                       "bytes": file_size(path)})


def _vae_stages(ref: Any, info: VoxCPM2Info, specs: dict[str, GraphSpec], out: Path) -> dict[str, Any]:
    """AudioVAE encoder and streaming decoder (0.09 B parameters: traced with their weights inline,
    folded weight norm; far below protobuf's 2 GiB)."""
    import torch

    from .graphs import VaeDecoderStream, VaeEncoder

    g = torch.Generator().manual_seed(4)
    enc_cases = []
    with ref.loaded(("audio_vae.",)) as model, torch_threads(), torch.inference_mode():
        vae = model.audio_vae
        for frames, b in ((4, 1), (12, 2)):
            audio = torch.randn(b, frames * info.encode_hop, generator=g) * 0.3
            want = vae.encode(audio.unsqueeze(1), info.encode_sample_rate)
            enc_cases.append((frames, b, audio.numpy(), want.numpy()))
        enc_path = export_inline(VaeEncoder(vae).eval(), (torch.randn(1, 2 * info.encode_hop),), specs["vae_encoder"],
                                 out)
        dec = VaeDecoderStream(vae).eval()
        state_size, layout = dec.state_size, dec.layout
        z = torch.randn(2, info.feat_dim, 6 * info.patch_size, generator=g)
        whole = vae.decode(z)[:, 0].numpy()
        z_np = z.numpy()
        dec_path = export_inline(dec, (torch.randn(1, info.feat_dim, 2), torch.zeros(1, state_size)),
                                 specs["vae_decoder_stream"], out)
        del dec, vae, model
    release_memory()
    reports: dict[str, Any] = {}
    sess, tr = ort_session(enc_path), ErrorTracker()
    for frames, b, audio_np, want_np in enc_cases:
        tr.add("latents", ort_run(sess, {"audio": audio_np})[0], want_np, f"frames={frames} batch={b}")
    reports["vae_encoder"] = _finish(tr, "vae_encoder")
    sess, tr = ort_session(dec_path), ErrorTracker()
    for chunks in ((6,), (1, 2, 3), (1, 1, 1, 1, 1, 1)):
        state = np.zeros((2, state_size), np.float32)
        parts, at = [], 0
        for c in chunks:
            pcm, state = ort_run(sess, {"latents": z_np[..., at * info.patch_size:(at + c) * info.patch_size],
                                     "state": state})
            parts.append(pcm)
            at += c
        tr.add("pcm", np.concatenate(parts, axis=1), whole, f"chunks={chunks}")
    del sess
    reports["vae_decoder_stream"] = _finish(
        tr, "vae_decoder_stream", {"state_size": state_size, "state_layout": layout,
                                   "causal": "strict (exact streaming)"})
    return reports


def export_voxcpm2(src: Path, tmp: Path, info: VoxCPM2Info, precision: str,
                   progress: Callable[[int, int, str], None] | None, source: dict[str, Any],
                   lora: Path | None = None) -> dict[str, Any]:
    """Every graph into `tmp`, one stage at a time, each holding only the weights it traces (see
    export.memory); returns the manifest (the caller writes it and renames `tmp` into place).

    `lora`: a native VoxCPM2 LoRA adapter directory (export/voxcpm2/lora.py), validated whole before
    the first stage and merged into each targeted weight as its stage loads it, so every graph is
    exported and validated with the merged weights; the manifest's `adapter` records its identity."""
    import torch

    from .reference import StagedVoxCPM2

    stages = ["loading the checkpoint", "base LM", "residual LM", "local encoder, bridge, heads", "LocDiT",
              "AudioVAE"]
    torch.manual_seed(0)
    with StageRunner(stages, progress, precision, family=spec.FAMILY, source=source) as run:
        reports = run.reports
        with run.stage("loading the checkpoint", "load"):
            ref = StagedVoxCPM2(src, lora)
            with ref.loaded(("audio_vae.decoder.",)) as model:
                state_size = sum(c * n for c, n in _decoder_layout(model))
                del model
        specs = graph_specs(info, state_size)
        with run.stage("base LM", "base_lm"):
            reports["base_lm"] = _lm_stage(ref, "base_lm", specs["base_lm"], tmp)
        with run.stage("residual LM", "residual_lm"):
            reports["residual_lm"] = _lm_stage(ref, "residual_lm", specs["residual_lm"], tmp)
        with run.stage("local encoder, bridge, heads", "small"):
            reports.update(_small_stages(ref, info, specs, tmp))
        with run.stage("LocDiT", "locdit"):
            reports["locdit_step"] = _locdit_stage(ref, info, specs["locdit_step"], tmp)
        with run.stage("AudioVAE", "audio_vae"):
            reports.update(_vae_stages(ref, info, specs, tmp))
        adapter = None
        if ref.adapter is not None:
            unmerged = sorted(set(ref.adapter.targets) - ref.merged)
            check(not unmerged, f"LoRA targets never loaded by an export stage: {unmerged[:3]}")
            adapter = {**ref.adapter.identity, "merged_layers": len(ref.merged)}
        del ref
        run.quantize(QUANTIZED_GRAPHS, lambda name: _quantize(info, tmp / specs[name].filename, name, precision))
    copy_files(src, tmp / "tokenizer", TOKENIZER_FILES)
    dec_report = reports["vae_decoder_stream"]
    return run.manifest(
        tmp,
        model_size=model_size(info.lm.hidden_size),
        sizes=info.to_json(),
        sample_rate=info.sample_rate,
        samples_per_frame=info.samples_per_patch,
        vocoder_state_size=dec_report["state_size"],
        vocoder_state_layout=dec_report["state_layout"],
        tables={TEXT_TABLE: {"rows": info.vocab_size, "scale_emb_folded": info.scale_emb}},
        graphs=specs,
        configs=json_configs(src, "config.json"),
        adapter=adapter,
    )


def _quantize(info: VoxCPM2Info, path: Path, graph: str, precision: str) -> dict[str, Any]:
    """One graph through export.quantize.quantize_graph (the Qwen3-TTS path): the fields `quantized`
    and `vs_fp32` of its manifest entry."""
    if graph == "vae_decoder_stream":
        return quantize_graph(path, precision, _vae_decoder_vs_fp32, audio=True)
    if graph == "locdit_step":
        return quantize_graph(path, precision, lambda fp32, q: _locdit_vs_fp32(info, fp32, q))
    return quantize_graph(path, precision, lambda fp32, q: compare_outputs(fp32, q, _quant_feeds(info, graph)))


def _quant_feeds(info: VoxCPM2Info, graph: str, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Random inputs for comparing a quantized graph with its fp32 form (prefill and decode shapes
    for the LMs, one patch and several for the local encoder)."""
    rng = np.random.default_rng(seed)
    if graph == "local_encoder":
        return [{"feats": rng.standard_normal((n, info.patch_size, info.feat_dim)).astype(np.float32)} for n in (1, 5)]
    cfg = info.lm if graph == "base_lm" else info.residual
    return random_step_feeds(rng, ((1, 0, 8), (4, 12, 1)), hidden=cfg.hidden_size, layers=cfg.num_layers,
                             kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, positions=bool(cfg.rope))


def _locdit_vs_fp32(info: VoxCPM2Info, fp32_path: Path, quant_path: Path) -> dict[str, Any]:
    """One step's velocity (compare_outputs) and a whole 10-step solve's patch (the runtime's solver)."""
    rng = np.random.default_rng(0)
    d, p, m = info.feat_dim, info.patch_size, 2 * info.dit.hidden_size

    def rand(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    feeds = [{"x": rand(b, d, p), "mu": rand(b, m), "cond": rand(b, d, p), "t": rng.random(b, dtype=np.float32),
              "dt": np.full(b, 0.1, np.float32), "cfg_value": np.full(b, 2.0, np.float32)} for b in (1, 3)]
    report = compare_outputs(fp32_path, quant_path, feeds)
    rows = [SolveRow(rand(d, p), rand(m), rand(d, p), 10, 2.0) for _ in range(2)]
    patches = []
    for path in (fp32_path, quant_path):
        sess = ort_session(path)

        def step(x: Any, mu: Any, cond: Any, t: Any, dt: Any, cfg: Any, s: Any = sess) -> Any:
            return ort_run(s, {"x": x, "mu": mu, "cond": cond, "t": t, "dt": dt, "cfg_value": cfg})[0]

        patches.append(np.stack(solve(rows, step, mean_mode=info.mean_mode)))
        del sess, step
    report["max_abs_err"]["patch (10-step solve)"] = float(f"{max_abs(patches[1], patches[0]):.3g}")
    report["snr_db_per_output"]["patch (10-step solve)"] = snr_db(patches[0], patches[1])
    return report


def _vae_decoder_vs_fp32(fp32_path: Path, quant_path: Path, *, seed: int = 0) -> dict[str, Any]:
    """Streamed decode of random latents (two chunks, state carried) by both graphs: audio error
    (as export.qwen3_tts.exporter.compare_vocoder does for Qwen3-TTS)."""
    rng = np.random.default_rng(seed)
    a, b = ort_session(fp32_path), ort_session(quant_path)
    lat = next(i for i in a.get_inputs() if i.name == "latents")
    st = next(i for i in a.get_inputs() if i.name == "state")
    z = rng.standard_normal((2, int(lat.shape[1]), 12)).astype(np.float32)
    ref, got = (run_in_chunks(sess, z, int(st.shape[1]), (4, 8), input_name="latents") for sess in (a, b))
    return {"audio_max_abs": float(f"{np.abs(got - ref).max():.3g}"), "snr_db": snr_db(ref, got)}


def _decoder_layout(model: Any) -> list[tuple[int, int]]:
    from .graphs import VaeDecoderStream

    return VaeDecoderStream(model.audio_vae).layout
