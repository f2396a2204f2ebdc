"""MOSS-Audio-Tokenizer-Nano's exported graphs (export/moss_tts_nano/codec.py) against mlx-audio 0.6.2 (the
reference, "mlx" through refenv: tests/moss_tts_nano_codec_mlx.py) and vLLM-Omni 0.30.0's vendored torch codec
(second oracle, "ref5": tests/moss_tts_nano_codec_vllm.py), on the project's tiny codec and on one mlx-audio made
from its own config classes (tests/moss_tts_nano_codec_foreign.py: other patches, heads, layers, windows):

- encoder: the same codes exactly, for 48 kHz clips ending in a partial frame and crossing every window, fed to
  the graph chunk by chunk;
- decoder: the reference's whole decode, downmixed by the mean, within 1e-5 relative to the signal's peak; and
  the graph's streamed decode equal to its whole decode in several chunkings, across every transformer's window,
  including chunks of several frames that straddle it (where a ring cache of `context` slots, vLLM-Omni's
  streaming cache, would drop keys the early queries of the chunk still see) and mlx-audio's own streaming
  decoder equal to its whole decode;
- the checkpoint reader: the real layout written, the codec found in its checkpoint forms, wrong tensors refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.export

TESTS = Path(__file__).resolve().parents[1]
MLX = TESTS / "moss_tts_nano_codec_mlx.py"
VLLM = TESTS / "moss_tts_nano_codec_vllm.py"
FOREIGN = TESTS / "moss_tts_nano_codec_foreign.py"
REL = 1e-5  # decode error allowed, relative to the reference signal's peak
SPF = 3840


def _require_mlx() -> None:
    import refenv

    try:
        refenv.python("mlx")
    except refenv.RefEnvError as exc:
        refenv.missing(str(exc))


def _tiny(out: Path) -> None:
    from export.moss_tts_nano.tiny_codec import write_codec

    write_codec(out / "audio_tokenizer", "tiny", seed=3)


def _foreign(out: Path) -> None:
    import refenv

    refenv.run("mlx", FOREIGN, {}, [str(out)])


_EXPORTS: dict[str, dict[str, Any]] = {}


def _export(name: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A codec checkpoint (the store's) and a fresh export of its two graphs, with the sessions to run them."""
    from artifacts import STORE

    from export.moss_tts_nano.codec import codec_dims, export_codec
    from export.moss_tts_nano.tiny_codec import load_codec
    from export.tracing import ort_session

    _require_mlx()
    if name not in _EXPORTS:
        if name == "tiny":
            ckpt = STORE.checkpoint("moss-codec-tiny", _tiny)
        else:
            ckpt = STORE.checkpoint("moss-codec-foreign", _foreign, sources=[FOREIGN])
        out = tmp_path_factory.mktemp(f"moss-codec-{name}")
        result = export_codec(ckpt, out)
        config, _ = load_codec(ckpt / "audio_tokenizer")
        _EXPORTS[name] = {"ckpt": ckpt, "result": result, "dims": codec_dims(config),
                          "dec": ort_session(out / "moss_codec_decoder.onnx"),
                          "enc": ort_session(out / "moss_codec_encoder.onnx")}
    return _EXPORTS[name]


@pytest.fixture(scope="module", params=["tiny", "foreign"])
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The project's tiny codec, then the one mlx-audio made."""
    return _export(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _export("tiny", tmp_path_factory)


def _clip(frames: int, extra: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(frames * SPF + extra) / 48000
    wav = 0.3 * np.sin(2 * np.pi * (180 + 40 * seed) * t) * (1 + 0.5 * np.sin(2 * np.pi * 2.5 * t))
    return (wav + 0.05 * rng.standard_normal(t.shape)).astype(np.float32)


def _graph_codes(ex: dict[str, Any], clip: np.ndarray, chunks: list[int]) -> np.ndarray:
    from export.moss_tts_nano.codec import run_chunks

    whole = clip[: len(clip) // SPF * SPF][None]  # the trailing partial frame gives no code
    return run_chunks(ex["enc"], "audio", whole, chunks, ex["result"].fields["codec"]["encoder_state_size"], SPF)[0]


def _graph_pcm(ex: dict[str, Any], codes: np.ndarray, chunks: list[int]) -> np.ndarray:
    from export.moss_tts_nano.codec import run_chunks

    return run_chunks(ex["dec"], "codes", codes[None], chunks, ex["result"].vocoder_state_size, 1)[0]


def _windows(ex: dict[str, Any]) -> tuple[int, int]:
    from export.moss_tts_nano.codec import window_frames

    return window_frames(ex["dims"].encoder), window_frames(ex["dims"].decoder)


def test_codes_and_decode_match_mlx(exported: dict[str, Any]) -> None:
    import refenv

    ewin, dwin = _windows(exported)
    nq, size = exported["dims"].num_quantizers, exported["dims"].codebook_size
    clips = [_clip(ewin + 3, 1000, 1), _clip(2, 17, 2)]
    frames = dwin + 5
    codes = np.random.default_rng(4).integers(0, size, (frames, nq)).astype(np.int64)
    chunks = [1, 2, dwin - 1, frames - dwin - 2]  # the third chunk straddles every window
    inputs = {"audio_0": clips[0], "audio_1": clips[1], "codes_2": codes, "chunks_2": np.array(chunks)}
    ref = refenv.run("mlx", MLX, inputs, [str(exported["ckpt"])])

    assert ref["codes_0"].shape == (ewin + 3, nq)  # floor(samples / 3840) frames
    np.testing.assert_array_equal(_graph_codes(exported, clips[0], [ewin + 3]), ref["codes_0"])
    np.testing.assert_array_equal(_graph_codes(exported, clips[0], [1, ewin, 2]), ref["codes_0"])
    np.testing.assert_array_equal(_graph_codes(exported, clips[1], [1, 1]), ref["codes_1"])

    whole_ref = ref["whole_2"]  # [samples, 2]
    assert whole_ref.shape == (frames * SPF, 2)
    np.testing.assert_array_equal(ref["stream_2"], whole_ref)  # mlx-audio's own streaming decoder is exact
    mono = whole_ref.mean(axis=1)
    tol = REL * float(np.abs(mono).max())
    assert float(np.abs(mono).max()) > 1e-3  # a signal, not silence
    for ch in ([frames], chunks, [1] * frames, [dwin, dwin, frames - 2 * dwin] if frames > 2 * dwin else [3, frames - 3]):
        np.testing.assert_allclose(_graph_pcm(exported, codes, ch), mono, rtol=0, atol=tol, err_msg=f"chunks {ch}")


def test_torch_modules_stereo_match_mlx(tiny: dict[str, Any]) -> None:
    """The modules the graphs are traced from, stereo (before the downmix), against mlx-audio's channels."""
    import refenv

    from export.moss_tts_nano.codec import DecoderStream, decode
    from export.moss_tts_nano.tiny_codec import load_codec

    _, dwin = _windows(tiny)
    dims = tiny["dims"]
    codes = np.random.default_rng(6).integers(0, dims.codebook_size, (dwin + 2, dims.num_quantizers))
    ref = refenv.run("mlx", MLX, {"codes_0": codes}, [str(tiny["ckpt"])])["whole_0"]
    config, weights = load_codec(tiny["ckpt"] / "audio_tokenizer")
    stereo = decode(DecoderStream(config, weights, mono=False).eval(), codes[None], [2, dwin])[0]
    np.testing.assert_allclose(stereo.T, ref, rtol=0, atol=REL * float(np.abs(ref).max()))


def test_matches_vllm_omni_codec(exported: dict[str, Any]) -> None:
    """vLLM-Omni's torch MossAudioTokenizerModel loads the same weights strictly: the same codes, the same audio."""
    from vllm_omni_source import run_with_wheel

    ewin, dwin = _windows(exported)
    dims = exported["dims"]
    clip = _clip(ewin + 2, 300, 3)
    codes = np.random.default_rng(8).integers(0, dims.codebook_size, (dwin + 3, dims.num_quantizers))
    ref = run_with_wheel("fish_speech", VLLM, str(exported["ckpt"] / "audio_tokenizer"),
                         inputs={"audio_0": clip, "codes_1": codes})
    np.testing.assert_array_equal(_graph_codes(exported, clip, [2, ewin]), ref["codes_0"])
    mono = ref["whole_1"].mean(axis=1)
    np.testing.assert_allclose(_graph_pcm(exported, codes, [1, dwin, 2]), mono, rtol=0,
                               atol=REL * float(np.abs(mono).max()))


def test_rows_at_different_positions_batch(tiny: dict[str, Any]) -> None:
    """Two streams in one call, each at its own position with its own arena row (rows 2 and 0 of three, the third
    holding another stream's windows), equal each decoded alone; the updates touch only their own rows."""
    from export.tracing import ort_run
    from ttscore.runtime.vocoder import write_updates

    _, dwin = _windows(tiny)
    dims, size = tiny["dims"], tiny["result"].vocoder_state_size
    rng = np.random.default_rng(9)
    a = rng.integers(0, dims.codebook_size, (dwin + 3, dims.num_quantizers))
    b = rng.integers(0, dims.codebook_size, (3, dims.num_quantizers))
    whole_a = _graph_pcm(tiny, a, [dwin + 3])
    arena = np.zeros((3, size), np.float32)
    arena[1] = rng.standard_normal(size).astype(np.float32)  # a third stream's row, never read here
    other = arena[1].copy()
    _, index, values = ort_run(tiny["dec"], {"codes": a[None, :dwin], "state": arena, "row": np.array([2]),
                                             "position": np.array([0])})
    write_updates(arena, np.array([2]), index, values)
    assert not arena[0].any() and arena[2].any()
    pcm, index, values = ort_run(tiny["dec"], {"codes": np.stack([a[dwin:], b]), "state": arena,
                                               "row": np.array([2, 0]), "position": np.array([dwin, 0])})
    write_updates(arena, np.array([2, 0]), index, values)
    np.testing.assert_array_equal(arena[1], other)
    tol = 1e-5 * float(np.abs(whole_a).max())
    np.testing.assert_allclose(pcm[0], whole_a[dwin * SPF:], rtol=0, atol=tol)
    np.testing.assert_allclose(pcm[1], _graph_pcm(tiny, b, [3]), rtol=0, atol=tol)


# --- the checkpoint -------------------------------------------------------------------------------------


def test_tiny_codec_is_the_real_layout(tmp_path: Path) -> None:
    from export.moss_tts_nano.tiny_codec import (
        INDEX,
        SHARD,
        codec_config,
        load_codec,
        tensor_shapes,
        write_codec,
    )

    real = tensor_shapes(codec_config("real"))
    assert sum(int(np.prod(s)) for s in real.values()) == 21_969_664  # the model card's parameter count
    cfg = write_codec(tmp_path / "c", "tiny")
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == sorted(["config.json", INDEX, SHARD])
    assert set(cfg) >= {"model_type", "architectures", "auto_map", "sampling_rate", "downsample_rate",
                        "number_channels", "enable_channel_interleave", "causal_transformer_context_duration",
                        "encoder_kwargs", "decoder_kwargs", "quantizer_type", "quantizer_kwargs"}
    index = json.loads((tmp_path / "c" / INDEX).read_text())
    names = set(index["weight_map"])
    for want in ("encoder.1.transformer.layers.0.self_attn.in_projs.0.weight", "decoder.1.input_proj.weight",
                 "decoder.7.output_proj.weight", "encoder.3.transformer.layers.0.linear1.weight",
                 "decoder.5.transformer.layers.0.layer_scale_2.scale",
                 "quantizer.input_proj.parametrizations.weight.original0",
                 "quantizer.quantizers.15.out_proj.parametrizations.weight.original1",
                 "quantizer.quantizers.0.codebook.weight"):
        assert want in names
    _, weights = load_codec(tmp_path / "c")
    assert set(weights) == names == set(tensor_shapes(cfg))


def test_reader_refuses_wrong_tensors(tmp_path: Path) -> None:
    from safetensors.numpy import load_file, save_file

    from export.moss_tts_nano.tiny_codec import SHARD, load_codec, write_codec
    from ttscore.contract.errors import CheckpointError

    write_codec(tmp_path / "c", "tiny")
    shard = tmp_path / "c" / SHARD
    tensors = load_file(str(shard))
    gone = tensors.pop("decoder.3.transformer.layers.0.norm1.bias")
    tensors["decoder.3.transformer.layers.0.extra"] = gone
    save_file(tensors, str(shard))
    with pytest.raises(CheckpointError, match=r"1 missing .*norm1\.bias.*1 unexpected .*extra"):
        load_codec(tmp_path / "c")


def test_codec_found_in_its_checkpoint_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from export.moss_tts_nano.tiny_codec import write_codec
    from ttscore.contract.errors import CheckpointError
    from ttscore.runtime.families.moss_tts_nano.checkpoint import codec_dir as find_codec

    lm = tmp_path / "lm"
    lm.mkdir()
    key = "audio_tokenizer_pretrained_name_or_path"
    (lm / "config.json").write_text(json.dumps({key: "OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano"}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError, match="MOSS-Audio-Tokenizer-Nano"):
        find_codec(lm)
    repo = tmp_path / "hub" / "models--OpenMOSS-Team--MOSS-Audio-Tokenizer-Nano"
    snap = repo / "snapshots" / ("a" * 40)
    write_codec(snap, "tiny")
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("a" * 40)
    assert find_codec(lm).resolve() == snap.resolve()  # a repo id in the Hugging Face cache
    (lm / "config.json").write_text(json.dumps({key: str(repo)}))
    assert find_codec(lm).resolve() == snap.resolve()  # a models--Org--Name folder
    (lm / "config.json").write_text(json.dumps({key: str(snap)}))
    assert find_codec(lm) == snap  # a snapshot folder
    other = repo / "snapshots" / ("b" * 40)
    shutil.copytree(snap, other)
    (repo / "refs" / "v2").write_text("b" * 40)
    for named, want in (("OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano", snap),  # refs/main among two snapshots
                        ("OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano@v2", other),  # a ref
                        ("OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano@" + "b" * 40, other)):  # a commit
        (lm / "config.json").write_text(json.dumps({key: named}))
        assert find_codec(lm).resolve() == want.resolve(), named
    (lm / "config.json").write_text(json.dumps({key: "OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano@v3"}))
    with pytest.raises(CheckpointError, match="huggingface-cli download OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano@v3"):
        find_codec(lm)
    (lm / "codec").mkdir()
    (lm / "codec" / "config.json").write_text(json.dumps({"model_type": "not a codec"}))
    (lm / "config.json").write_text(json.dumps({key: "codec"}))
    with pytest.raises(CheckpointError, match="'codec'"):  # a folder without a codec config is refused
        find_codec(lm)
    shutil.rmtree(lm / "codec")
    shutil.copytree(snap, lm / "codec")
    assert find_codec(lm) == lm / "codec"  # a folder relative to the checkpoint
    (lm / "audio_tokenizer").mkdir()
    assert find_codec(lm) == lm / "codec"  # an audio_tokenizer/ without a codec is passed over
    shutil.rmtree(lm / "audio_tokenizer")
    shutil.copytree(snap, lm / "audio_tokenizer")
    assert find_codec(lm) == lm / "audio_tokenizer"  # <checkpoint>/audio_tokenizer/ first
    (lm / "config.json").write_text("{}")
    shutil.rmtree(lm / "audio_tokenizer")
    with pytest.raises(CheckpointError, match="names none"):
        find_codec(lm)
