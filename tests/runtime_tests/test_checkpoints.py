"""Checkpoints as people have them (issue 19): sharded weights, other dtypes, the Hugging Face cache
and repo ids, for Qwen3-TTS and VoxCPM2.

The layouts are made from the session's tiny checkpoints (tests/checkpoint_layouts.py). What is
compared: a sharded fp32 copy, its Hugging Face cache snapshot (links into blobs/) and its repo id
(HF_HOME set, HF_HUB_OFFLINE=1) each give, through `triton-tts say --checkpoint` (export into the
cache on first use), the same WAV bytes (greedy / fixed seed) as the single-file checkpoint's
export; all three share one export (the cache is keyed by content). A bf16 copy gives the same
audio as the same bf16 weights stored upcast to fp32 (not as the fp32 original: its weights are
rounded): VoxCPM2 end to end, Qwen3-TTS as what its export reads (every weight, equal), which costs one
export less than each exporting twice.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from checkpoint_layouts import cast, hub_snapshot, shard

from triton_tts import cli
from triton_tts.checkpoints import find_checkpoints, resolve_checkpoint
from ttscore.contract.errors import CheckpointError
from ttscore.runtime.weights import checkpoint_fingerprint, read_header, read_weights

QWEN_REPO = "Qwen/Qwen3-TTS-tiny-CustomVoice"
VOX_REPO = "openbmb/VoxCPM2-tiny"
QWEN_SAY = ["--greedy", "--seed", "3", "--max-new-tokens", "12", "Hello there."]
VOX_SAY = ["--seed", "3", "--max-new-tokens", "6", "Hello there."]


@pytest.fixture
def hub_env(monkeypatch, tmp_path):
    """An offline Hugging Face home and an empty export cache for this test."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("TRITON_TTS_CACHE", str(tmp_path / "tts-cache"))
    return tmp_path


def _say(tmp: Path, tag: str, source: list[str], words: list[str]) -> bytes:
    out = tmp / f"{tag}.wav"
    assert cli.main(["say", *source, "-o", str(out), *words]) == 0
    return out.read_bytes()


def _layouts(ckpt: Path, root: Path, stems: tuple[str, ...], repo: str) -> dict[str, Path]:
    sharded = ckpt
    for i, stem in enumerate(stems):
        size = sum(p.stat().st_size for p in read_weights(ckpt, stem).files)
        sharded = shard(sharded, root / f"sharded-{i}", stem=stem, max_bytes=size // 3 + 1)
    snapshot = hub_snapshot(sharded, root / "hf" / "hub", repo)
    return {"sharded": sharded, "snapshot": snapshot}


@pytest.fixture(scope="module")
def qwen(tiny_custom_voice_greedy, tmp_path_factory):
    ckpt, art, _ = tiny_custom_voice_greedy
    root = tmp_path_factory.mktemp("qwen-layouts")
    return {"single": ckpt, "artifacts": art, "root": root,
            **_layouts(ckpt, root, ("model", "speech_tokenizer/model"), QWEN_REPO)}


@pytest.fixture(scope="module")
def vox(voxcpm2_tiny, voxcpm2_artifacts, tmp_path_factory):
    root = tmp_path_factory.mktemp("vox-layouts")
    return {"single": voxcpm2_tiny, "artifacts": voxcpm2_artifacts, "root": root,
            **_layouts(voxcpm2_tiny, root, ("model", "audiovae"), VOX_REPO)}


@pytest.fixture(scope="module")
def qwen_sharded_export(qwen, tmp_path_factory):
    """The export of the sharded Qwen3-TTS copy, whose files its snapshot and repo id name too (one fingerprint):
    what `say --checkpoint` makes on first use, made once here (ensure_artifacts, as say does) for the tests below."""
    from triton_tts.artifacts import ensure_artifacts

    return ensure_artifacts(qwen["sharded"], out=tmp_path_factory.mktemp("qwen-sharded") / "export", quiet=True)


# ---- reading the weights ----------------------------------------------------------------------------


@pytest.mark.unit
def test_sharded_weights_read_as_the_single_file(qwen, vox):
    for layouts, stems in ((qwen, ("model", "speech_tokenizer/model")), (vox, ("model", "audiovae"))):
        for stem in stems:
            single, sharded = read_weights(layouts["single"], stem), read_weights(layouts["sharded"], stem)
            assert sharded.index is not None and len(sharded.files) >= 3 and single.index is None
            assert sorted(sharded.tensors) == sorted(single.tensors) and sharded.dtypes == single.dtypes
            assert "F32" in sharded.dtypes
            index = json.loads(sharded.index.read_text())
            header = read_header(single.files[0])
            assert index["metadata"]["total_size"] == sum(
                v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if k != "__metadata__")


def _shards(d: Path) -> list[str]:
    return sorted(set(json.loads((d / "model.safetensors.index.json").read_text())["weight_map"].values()))


def _rewrite_index(d: Path, change) -> None:
    data = json.loads((d / "model.safetensors.index.json").read_text())
    change(data["weight_map"])
    (d / "model.safetensors.index.json").write_text(json.dumps(data))


def _missing_shard(d: Path) -> tuple[str, ...]:
    (d / _shards(d)[1]).unlink()
    return ("missing shard", _shards(d)[1])


def _truncated_shard(d: Path) -> tuple[str, ...]:
    last = d / _shards(d)[-1]
    last.write_bytes(last.read_bytes()[:-100])
    return (last.name, "truncated")


def _absent_tensor(d: Path) -> tuple[str, ...]:
    first = _shards(d)[0]
    _rewrite_index(d, lambda wm: wm.update({"extra.weight": first}))
    return ("'extra.weight'", f"not in {first}")


def _tensor_elsewhere(d: Path) -> tuple[str, ...]:
    def move(wm: dict) -> None:
        name = sorted(wm)[0]
        wm[name] = next(s for s in sorted(set(wm.values())) if s != wm[name])

    _rewrite_index(d, move)
    return ("holds tensor", "puts in")


def _no_weight_map(d: Path) -> tuple[str, ...]:
    (d / "model.safetensors.index.json").write_text("{}")
    return ("model.safetensors.index.json", "weight_map")


def _no_weights(d: Path) -> tuple[str, ...]:
    for p in d.glob("model*.safetensors*"):
        p.unlink()
    return ("missing", "model.safetensors.index.json")


@pytest.mark.unit
@pytest.mark.parametrize("mutate", [_missing_shard, _truncated_shard, _absent_tensor, _tensor_elsewhere,
                                    _no_weight_map, _no_weights])
def test_a_broken_sharded_checkpoint_names_the_file_or_tensor(qwen, vox, tmp_path, mutate):
    from ttscore.runtime.families.qwen3_tts.checkpoint import read_checkpoint
    from ttscore.runtime.families.voxcpm2.checkpoint import read_checkpoint as read_voxcpm2

    for layouts, read in ((qwen, read_checkpoint), (vox, read_voxcpm2)):
        ckpt = tmp_path / read.__module__ / "ckpt"
        shutil.copytree(layouts["sharded"], ckpt)
        needles = mutate(ckpt)
        with pytest.raises(CheckpointError) as err:
            read(ckpt)
        for n in needles:
            assert n.lower() in str(err.value).lower(), str(err.value)


@pytest.mark.unit
def test_export_of_a_checkpoint_missing_a_shard_says_which(qwen, tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(qwen["sharded"], ckpt)
    _, shard_name = _missing_shard(ckpt)
    assert cli.main(["export", "--checkpoint", str(ckpt), "--out", str(tmp_path / "out"), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"triton-tts: error: {ckpt}: missing shard {shard_name} (named by model.safetensors.index.json)"]
    assert not (tmp_path / "out").exists()


@pytest.mark.unit
def test_other_dtypes_are_read(qwen, tmp_path):
    for dtype, tag in (("bfloat16", "BF16"), ("float16", "F16")):
        copy = cast(qwen["sharded"], tmp_path / dtype, dtype)
        weights = read_weights(copy)
        assert tag in weights.dtypes and "F32" not in weights.dtypes and weights.index is not None
        assert tag in read_weights(copy, "speech_tokenizer/model").dtypes


# ---- naming a checkpoint --------------------------------------------------------------------------


@pytest.mark.unit
def test_a_snapshot_a_cache_folder_and_a_repo_id_name_the_same_checkpoint(qwen, hub_env, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(qwen["root"] / "hf"))
    snapshot = qwen["snapshot"]
    plain = resolve_checkpoint(str(qwen["sharded"]))
    assert plain.path == qwen["sharded"] and plain.name == qwen["sharded"].name and plain.repo_id is None
    by_snapshot = resolve_checkpoint(str(snapshot))
    assert by_snapshot.name == "Qwen3-TTS-tiny-CustomVoice" and by_snapshot.repo_id == QWEN_REPO
    by_folder = resolve_checkpoint(str(snapshot.parent.parent))
    by_repo = resolve_checkpoint(QWEN_REPO)
    by_revision = resolve_checkpoint(f"{QWEN_REPO}@{snapshot.name}")
    for c in (by_folder, by_repo, by_revision):
        assert c.path.resolve() == snapshot.resolve() and c.name == "Qwen3-TTS-tiny-CustomVoice"
        assert c.revision == snapshot.name
    assert (snapshot / "model.safetensors.index.json").is_symlink()


@pytest.mark.unit
def test_a_repo_id_not_in_the_cache_offline_says_how_to_get_it(hub_env, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf"))
    with pytest.raises(CheckpointError) as err:
        resolve_checkpoint("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice")
    msg = str(err.value)
    assert "huggingface-cli download Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice" in msg and "HF_HUB_OFFLINE" in msg
    assert str(tmp_path / "empty-hf" / "hub") in msg
    assert cli.main(["export", "--checkpoint", "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice@v2", "--out",
                     str(tmp_path / "o")]) == 2
    assert "huggingface-cli download Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice --revision v2" in capsys.readouterr().err
    with pytest.raises(CheckpointError, match="does not exist"):
        resolve_checkpoint(str(tmp_path / "nope"))
    (tmp_path / "a-file").write_text("")
    with pytest.raises(CheckpointError, match="is not a checkpoint directory"):
        resolve_checkpoint(str(tmp_path / "a-file"))


@pytest.mark.unit
def test_prepare_finds_the_models_of_a_hugging_face_cache(qwen, vox, tmp_path):
    from triton_tts.prepare import PrepareError
    from triton_tts.prepare import find_checkpoints as prepare_finds

    hub = tmp_path / "hub"
    hub_snapshot(qwen["sharded"], hub, QWEN_REPO)
    hub_snapshot(vox["sharded"], hub, VOX_REPO)
    (hub / ".locks").mkdir()
    found = find_checkpoints(hub)
    assert [(c.name, c.repo_id) for c in found] == [("Qwen3-TTS-tiny-CustomVoice", QWEN_REPO),
                                                    ("VoxCPM2-tiny", VOX_REPO)]
    assert [c.name for c in prepare_finds(str(hub / f"models--{VOX_REPO.replace('/', '--')}"))] == ["VoxCPM2-tiny"]
    assert [c.path for c in prepare_finds(str(qwen["sharded"]))] == [qwen["sharded"]]
    with pytest.raises(PrepareError, match="no checkpoint in"):
        prepare_finds(str(tmp_path / "hub" / ".locks"))


@pytest.mark.unit
def test_the_fingerprint_follows_the_content_not_the_path(qwen, tmp_path):
    sharded, snapshot = qwen["sharded"], qwen["snapshot"]
    copy = tmp_path / "copy"
    shutil.copytree(sharded, copy)
    (copy / ".cache").mkdir()  # what `huggingface-cli download --local-dir` leaves: not content
    (copy / ".cache" / "x.metadata").write_text("etag")
    fp = checkpoint_fingerprint(sharded)
    assert checkpoint_fingerprint(copy) == checkpoint_fingerprint(snapshot) == fp
    assert checkpoint_fingerprint(qwen["single"]) != fp
    shard_file = copy / _shards(copy)[0]
    data = bytearray(shard_file.read_bytes())
    data[-1] ^= 1  # one weight changes: same size, same header
    shard_file.write_bytes(bytes(data))
    assert checkpoint_fingerprint(copy) != fp


# ---- exported and run ------------------------------------------------------------------------------


@pytest.mark.export
@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3_tts", "voxcpm2"])
def test_sharded_snapshot_and_repo_id_give_the_single_files_audio(family, qwen, vox, hub_env, monkeypatch,
                                                                 request):
    """VoxCPM2's sharded copy is exported by the first `say`; Qwen3-TTS's export (qwen_sharded_export, the same
    function say calls) is in the cache beforehand, so the three sources must find it and export nothing."""
    layouts, repo, words = (qwen, QWEN_REPO, QWEN_SAY) if family == "qwen3_tts" else (vox, VOX_REPO, VOX_SAY)
    monkeypatch.setenv("HF_HOME", str(layouts["root"] / "hf"))
    tmp = hub_env
    if family == "qwen3_tts":
        from triton_tts.artifacts import cached_export

        placed = cached_export(checkpoint_fingerprint(layouts["sharded"]), "fp32")
        shutil.copytree(request.getfixturevalue("qwen_sharded_export"), placed)
        made = (placed / "manifest.json").stat().st_mtime_ns
    want = _say(tmp, "single", ["--artifacts", str(layouts["artifacts"])], words)
    assert len(want) > 10_000  # audio, not just a WAV header
    for tag, source in (("sharded", str(layouts["sharded"])), ("snapshot", str(layouts["snapshot"])),
                        ("repo", repo)):
        assert _say(tmp, tag, ["--checkpoint", source], words) == want, tag
    # One export for the three: the cache is keyed by the files' content, not their path.
    exports = [p for p in (tmp / "tts-cache" / "artifacts").iterdir() if not p.name.startswith(".")]
    assert len(exports) == 1
    manifest = json.loads((exports[0] / "manifest.json").read_text())
    assert manifest["source"]["fingerprint"] == checkpoint_fingerprint(layouts["sharded"])
    if family == "qwen3_tts":
        assert (exports[0] / "manifest.json").stat().st_mtime_ns == made  # found, not exported again


def _bf16_and_upcast(layouts: dict[str, Path], tmp: Path) -> tuple[Path, Path]:
    bf16 = cast(layouts["sharded"], tmp / "bf16", "bfloat16")
    upcast = cast(bf16, tmp / "upcast", "float32")
    assert "BF16" in read_weights(bf16).dtypes and "F32" not in read_weights(bf16).dtypes
    assert "F32" in read_weights(upcast).dtypes and "BF16" not in read_weights(upcast).dtypes
    return bf16, upcast


@pytest.mark.export
@pytest.mark.slow
def test_a_bf16_checkpoint_exports_as_its_weights_upcast(vox, hub_env):
    """End to end for one family (two exports); Qwen3-TTS's reading of the same layouts is checked below."""
    bf16, upcast = _bf16_and_upcast(vox, hub_env)
    got = _say(hub_env, "bf16", ["--checkpoint", str(bf16)], VOX_SAY)
    assert got == _say(hub_env, "upcast", ["--checkpoint", str(upcast)], VOX_SAY)


@pytest.mark.export
def test_a_bf16_qwen3_checkpoint_is_read_as_its_weights_upcast(qwen, tmp_path):
    """What Qwen3-TTS's export reads of a bf16 checkpoint (every parameter through its staged loader, the speech
    tokenizer as from_pretrained gives it) is float32, equal to the same weights stored upcast, and not the fp32
    original (rounded): the graphs are then built from equal weights, as for VoxCPM2 end to end above."""
    import torch

    from export.qwen3_tts.reference import StagedReference

    def read(ckpt: Path) -> dict[str, torch.Tensor]:
        ref = StagedReference(ckpt)
        with ref.loaded(("",)) as model:
            weights = {n: p.detach().clone() for n, p in model.named_parameters()}
        with ref.speech_tokenizer() as codec:
            weights |= {f"speech_tokenizer.{n}": t.detach().clone() for n, t in codec.state_dict().items()}
        return weights

    bf16, upcast = _bf16_and_upcast(qwen, tmp_path)
    got, want, original = read(bf16), read(upcast), read(qwen["single"])
    assert got.keys() == want.keys() == original.keys()
    floats = [n for n, t in want.items() if t.is_floating_point()]
    assert all(got[n].dtype == torch.float32 and torch.equal(got[n], want[n]) for n in got), \
        [n for n in got if not torch.equal(got[n], want[n])][:3]
    assert any(not torch.equal(got[n], original[n]) for n in floats)


@pytest.mark.export
@pytest.mark.slow
def test_prepare_serves_a_cached_repo_under_its_name(qwen, qwen_sharded_export, tmp_path):
    """`TTS_CHECKPOINTS` pointing at a Hugging Face cache: the model is served as the repo's name,
    with the `Org/Name` alias the OpenAI examples use. Its artifacts folder already holds a current export of the
    snapshot's files (qwen_sharded_export): prepare keeps it and exports nothing."""
    from triton_tts.prepare import find_checkpoints as prepare_finds
    from triton_tts.prepare import prepare

    hub = qwen["snapshot"].parent.parent.parent
    served = tmp_path / "artifacts" / "Qwen3-TTS-tiny-CustomVoice"
    shutil.copytree(qwen_sharded_export, served)
    made = (served / "manifest.json").stat().st_mtime_ns
    config = prepare(prepare_finds(str(hub)), tmp_path / "artifacts", tmp_path / "repo", tmp_path / "gw.json",
                     triton_url="127.0.0.1:8001", quiet=True)
    assert (served / "manifest.json").stat().st_mtime_ns == made  # kept, not exported again
    (model,) = config["models"]
    assert model["name"] == "Qwen3-TTS-tiny-CustomVoice" and model["aliases"] == [QWEN_REPO]
    assert model["artifacts_dir"] == str(tmp_path / "artifacts" / "Qwen3-TTS-tiny-CustomVoice")
