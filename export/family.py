"""What a model family gives the export layer: one `ExportFamily` per family, registered in
export/families.py (or found through ttscore.contract.plugins as `<package>.export.FAMILY`).

The tools (`export`, `make-tiny`, `prepare`, `serve`) know a family only through this entry: how to
recognise its checkpoint, export it, write a random-weight one, which demo checkpoints it offers,
and which Triton models its artifacts are served with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from export.tiny_weights import TINY_SIZES
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.manifest import Manifest
from ttscore.runtime.family import resolve

# Progress hook: (stage number from 1, number of stages, what the stage does), called as each starts.
ExportProgress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class TinyOption:
    """A `make-tiny` option of one family (besides --out, --seed and --size, which every family takes).
    `choices` None and no `flag`: a string option; `flag`: a store-true switch."""

    name: str  # the keyword make_tiny takes; the CLI flag is `--name` with dashes
    help: str
    choices: tuple[str, ...] | None = None
    flag: bool = False

    @property
    def cli(self) -> str:
        return "--" + self.name.replace("_", "-")


class ServedCheckpoint(Protocol):
    """One exported checkpoint a deployment serves (triton_tts.serve.Served)."""

    @property
    def name(self) -> str: ...

    @property
    def artifacts(self) -> Path: ...

    @property
    def manifest(self) -> Manifest: ...


@dataclass
class Deployment:
    """What a family's served checkpoints need in the Triton model repository, beyond each one's
    `speech_generation` model (which the caller names and configures).

    `vocoder` and `voice_features`: per served checkpoint name, the `vocoder` parameter of its
    speech_generation model and the Triton model (or None) the gateway computes voice features with.
    `models`: (name, the source model it is rendered from, its parameters or None for a model
    rendered as it is, e.g. an ensemble). `readiness`: models the
    gateway waits for before it reports ready. `flags`: extra facts for the plan (e.g. whether a
    vocoder is shared)."""

    vocoder: dict[str, str] = field(default_factory=dict)
    voice_features: dict[str, str | None] = field(default_factory=dict)
    models: list[tuple[str, str, dict[str, str] | None]] = field(default_factory=list)
    readiness: list[str] = field(default_factory=list)
    flags: dict[str, Any] = field(default_factory=dict)


def model_name(base: str, served: ServedCheckpoint, alone: bool) -> str:
    """A per-checkpoint Triton model: `base` when it is the only one of its kind, else `base_<name>`."""
    return base if alone else f"{base}_{served.name}"


@dataclass(frozen=True)
class LoraSupport:
    """A family's startup LoRA adapters (`--lora DIR` of export, say, serve, prepare): merged into
    the weights before export, recorded in the manifest's `adapter`.

    identity(adapter_dir) -> {name, sha256, ...}: the adapter's format checked (no torch), and what
        the manifest and the export cache key record;
    make_tiny(checkpoint, out, seed) -> a random adapter for that (tiny) checkpoint, for tests.
    The family's `export` then takes `lora=adapter_dir` (given only when set)."""

    format: str  # for people, in errors: what an adapter directory holds
    identity: Callable[[Path], dict[str, Any]]
    make_tiny: Callable[[Path, Path, int], Path]


@dataclass(frozen=True)
class ExportFamily:
    """One model family's export entry.

    detect(checkpoint) -> whether the directory holds this family's checkpoint (its config.json);
    check(checkpoint) -> raise CheckpointError unless it is a complete, readable checkpoint (fast:
        no torch);
    export(src, tmp, precision, progress, source) -> write every artifact into `tmp` and return the
        manifest (build it with ttscore.contract.manifest.build_manifest);
    make_tiny(out, seed, size, **options) -> a random-weight checkpoint directory (`options` are the
        family's `tiny_options`, given only when set);
    deploy(served) -> the Triton models the family's served checkpoints need.
    """

    name: str  # the manifest's `family`
    display: str  # for people: "Qwen3-TTS"
    hub_org: str  # the Hugging Face organisation of its released checkpoints (`<org>/<id>` aliases)
    signature: str  # what detect looks for, for the error that no family recognises a directory
    detect: Callable[[Path], bool]
    check: Callable[[Path], object]
    export: Callable[[Path, Path, str, ExportProgress | None, dict[str, Any]], dict[str, Any]]
    make_tiny: Callable[..., Path]
    sizes: tuple[str, ...]  # make-tiny --size values, the first the default
    deploy: Callable[[Sequence[ServedCheckpoint]], Deployment]
    tiny_options: tuple[TinyOption, ...] = ()
    # The demo checkpoints of `serve` / `prepare --demo`: (directory name, make_tiny options).
    demo: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    lora: LoraSupport | None = None  # startup LoRA adapters, for a family that takes them
    # The family's export format, written into the manifest (`export_revision`): raised when a change makes its
    # older exports unusable by this runtime (a graph's inputs or outputs), so `serve` / `prepare` re-export a
    # cached export of the same checkpoint instead of serving one that fails to load (triton_tts.artifacts).
    revision: int = 1


# --- the kit: what most families' entries are made of -------------------------------------------------


def lazy(target: str) -> Callable[..., Any]:
    """`"package.module:function"`, imported when first called, so a family's entry stays light to import
    (no torch) until a tool uses it. Every family's targets are resolved by
    tests/export_tests/test_export_families.py."""
    name = target.partition(":")[2]

    def call(*args: Any, **kwargs: Any) -> Any:
        return resolve(target)(*args, **kwargs)

    call.__name__, call.__qualname__ = name, target
    call.target = target  # type: ignore[attr-defined]
    return call


def sized_make_tiny(target: str, family: str, sizes: tuple[str, ...]) -> Callable[..., Path]:
    """`make_tiny(out, seed, size, **options)` of a `lazy` target `maker(out: Path, seed=, size=, ...)`,
    refusing a size the family does not make (400 naming `size`)."""
    make = lazy(target)

    def make_tiny(out: Path, seed: int = 0, size: str = sizes[0], **options: Any) -> Path:
        if size not in sizes:
            raise InvalidRequest(f"--family {family} takes --size {' or '.join(sizes)}", "size")
        made: Path = make(Path(out), seed=seed, size=size, **options)
        return made

    make_tiny.target = target  # type: ignore[attr-defined]
    return make_tiny


def inline_deploy(encoder: str | None = None) -> Callable[[Sequence[ServedCheckpoint]], Deployment]:
    """The deployment of a family whose speech_generation decodes inline: without `encoder`, no voice-features
    model; with it, each checkpoint gets its own model rendered from the source model `encoder` over its
    artifacts (its voice features), named `encoder` when it is the only one, else `encoder_<name>`."""

    def deploy(served: Sequence[ServedCheckpoint]) -> Deployment:
        plan = Deployment()
        alone = len(served) == 1
        for s in served:
            plan.vocoder[s.name] = "inline"
            plan.voice_features[s.name] = None if encoder is None else model_name(encoder, s, alone)
            if encoder is not None:
                plan.models.append((model_name(encoder, s, alone), encoder, {"artifacts_dir": str(s.artifacts)}))
        return plan

    return deploy


def inline_family(name: str, *, display: str, hub_org: str, signature: str, detect: str, export: str,
                  make_tiny: str, encoder: str | None = None) -> ExportFamily:
    """The entry of a family laid out by the kit's convention: its checkpoint is read in
    `ttscore.runtime.families.<name>.checkpoint` (`detect`: the predicate there; `read_checkpoint`: the check), it is
    exported by the function `export` of `export.<name>.exporter` and made by `make_tiny` of `export.<name>.tiny`
    (sizes tiny and real), its demo checkpoint is `<display, dashed>-tiny`, and each checkpoint decodes inline
    (`inline_deploy(encoder)`)."""
    checkpoint = f"ttscore.runtime.families.{name}.checkpoint"
    return ExportFamily(
        name=name, display=display, hub_org=hub_org, signature=signature,
        detect=lazy(f"{checkpoint}:{detect}"),
        check=lazy(f"{checkpoint}:read_checkpoint"),
        export=lazy(f"export.{name}.exporter:{export}"),
        make_tiny=sized_make_tiny(f"export.{name}.tiny:{make_tiny}", name, TINY_SIZES),
        sizes=TINY_SIZES,
        deploy=inline_deploy(encoder),
        demo=((display.replace(" ", "-") + "-tiny", {}),),
    )
