"""Strict renderer of the Triton model repository.

`model_repository/<model>/config.pbtxt` files are committed literally and load as they are.
Per-deployment knobs are applied here by parsing each config with `model_config_pb2` +
`text_format`, setting fields, and writing a build copy (with the model.py files) to an output
directory. Every setting name is checked: an unknown model, knob or parameter is an error, never a
silent default. The contract checks run on every render:

- public models (speech_generation, voice_features) against ttscore.contract.tensors's tensor tables
  (speech_generation's committed config lists the project's families' inputs; the inputs only
  family packages outside the project take are added to it here, from the table);
- models that host an exported graph against its ttscore.contract.graphs GraphSpec (per request: the spec dims
  without the leading batch axis; a symbolic spec dim must be -1 or fixed, a numeric one must match;
  a per-row scalar is `[1]`);
- ensemble steps against the composing models' inputs/outputs.

CLI: `python -m ttscore.backend.repository --out build/model_repository --artifacts-dir /artifacts
[--settings deploy.json] [--set code2wav.instances=2 ...] [--models code2wav ...]`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from ttscore.backend import families
from ttscore.contract import plugins
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import ArtifactError, TTSError
from ttscore.contract.graphs import GraphSpec, TensorSpec
from ttscore.contract.manifest import MANIFEST, read_manifest

# The committed templates ship inside the package (a link to the checkout's model_repository/).
SOURCE_REPOSITORY = Path(__file__).resolve().parent / "model_repository"
# Files allowed next to the model folders (Triton only treats directories as models).
ROOT_FILES = ("README.md",)

SPEC_DTYPES = {"float32": "TYPE_FP32", "int64": "TYPE_INT64", "int32": "TYPE_INT32", "bool": "TYPE_BOOL"}


class RepositoryError(TTSError):
    """The repository or the deployment settings are invalid."""


# --- settings -----------------------------------------------------------------------------------

MODEL_KEYS = ("instances", "kind", "max_batch_size", "max_queue_delay_us", "preferred_batch_sizes", "parameters")
KINDS = {"cpu": "KIND_CPU", "gpu": "KIND_GPU"}


@dataclass(frozen=True)
class ModelSettings:
    instances: int | None = None
    kind: str | None = None  # "cpu" | "gpu"
    max_batch_size: int | None = None
    max_queue_delay_us: int | None = None
    preferred_batch_sizes: tuple[int, ...] | None = None
    parameters: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, model: str, raw: Mapping[str, Any]) -> ModelSettings:
        if not isinstance(raw, Mapping):
            raise RepositoryError(f"settings for {model} must be a mapping")
        unknown = sorted(set(raw) - set(MODEL_KEYS))
        if unknown:
            raise RepositoryError(f"{model}: unknown setting(s) {', '.join(unknown)} (known: {', '.join(MODEL_KEYS)})")

        def pos_int(key: str, minimum: int = 1) -> int | None:
            value = raw.get(key)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise RepositoryError(f"{model}.{key} must be an integer >= {minimum}, got {value!r}")
            return value

        kind = raw.get("kind")
        if kind is not None and kind not in KINDS:
            raise RepositoryError(f"{model}.kind must be one of {', '.join(KINDS)}, got {kind!r}")
        pbs = raw.get("preferred_batch_sizes")
        if pbs is not None:
            if not isinstance(pbs, (list, tuple)) or not all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in pbs
            ):
                raise RepositoryError(f"{model}.preferred_batch_sizes must be a list of integers >= 1")
            pbs = tuple(pbs)
        params = raw.get("parameters") or {}
        if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
            raise RepositoryError(f"{model}.parameters must map names to values")
        return cls(
            instances=pos_int("instances"),
            kind=kind,
            max_batch_size=pos_int("max_batch_size"),
            max_queue_delay_us=pos_int("max_queue_delay_us", 0),
            preferred_batch_sizes=pbs,
            parameters={k: str(v) for k, v in params.items()},
        )


def parse_settings(raw: Mapping[str, Any]) -> tuple[dict[str, ModelSettings], str | None]:
    """{"artifacts_dir": ..., "models": {name: {...}}} -> per-model settings + global artifacts_dir."""
    unknown = sorted(set(raw) - {"artifacts_dir", "models"})
    if unknown:
        raise RepositoryError(f"unknown top-level setting(s) {', '.join(unknown)} (known: artifacts_dir, models)")
    models = raw.get("models") or {}
    if not isinstance(models, Mapping):
        raise RepositoryError("settings.models must be a mapping of model name to settings")
    artifacts = raw.get("artifacts_dir")
    return {name: ModelSettings.parse(name, value) for name, value in models.items()}, (
        str(artifacts) if artifacts is not None else None
    )


def parse_assignment(text: str) -> tuple[str, str, Any]:
    """`model.key=value` or `model.parameters.name=value` (values are JSON when they parse)."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise RepositoryError(f"--set expects model.key=value, got {text!r}")
    lhs, rhs = text.split("=", 1)
    model, key = lhs.split(".", 1)
    try:
        value: Any = json.loads(rhs)
    except json.JSONDecodeError:
        value = rhs
    return model, key, value


# --- reading and checking configs ---------------------------------------------------------------


def load_config(path: Path) -> mc.ModelConfig:
    try:
        return text_format.Parse(path.read_text(encoding="utf-8"), mc.ModelConfig())
    except (OSError, text_format.ParseError) as exc:
        raise RepositoryError(f"{path}: {exc}") from None


def committed_models(source: Path = SOURCE_REPOSITORY) -> dict[str, Path]:
    """Every model folder of the source repository; anything else at its root is an error."""
    if not source.is_dir():
        raise RepositoryError(f"{source} is not a directory")
    models: dict[str, Path] = {}
    for entry in sorted(source.iterdir()):
        if entry.is_dir():
            if not (entry / "config.pbtxt").is_file():
                raise RepositoryError(f"{entry} has no config.pbtxt (Triton treats every folder as a model)")
            config = load_config(entry / "config.pbtxt")
            if config.name != entry.name:
                raise RepositoryError(f"{entry}/config.pbtxt names {config.name!r}, folder is {entry.name!r}")
            if not any(p.is_dir() and p.name.isdigit() for p in entry.iterdir()):
                raise RepositoryError(f"{entry} has no numeric version folder")
            models[entry.name] = entry
        elif entry.name not in ROOT_FILES:
            raise RepositoryError(f"unexpected file {entry} at the repository root")
    return models


def _dims(values: Iterable[int]) -> list[int]:
    return [int(v) for v in values]


def _check_io(
    model: str, kind: str, tensors: Sequence[mc.ModelInput] | Sequence[mc.ModelOutput], table: Sequence[triton_io.TensorIO]
) -> None:
    got = {t.name: t for t in tensors}
    want = {t.name: t for t in table}
    if set(got) != set(want):
        raise RepositoryError(
            f"{model}: {kind}s {sorted(got)} differ from the contract {sorted(want)} (ttscore/contract/tensors.py)"
        )
    for name, t in want.items():
        c = got[name]
        dtype = mc.DataType.Name(c.data_type)
        if dtype != t.config_dtype or _dims(c.dims) != list(t.dims):
            raise RepositoryError(
                f"{model}: {kind} {name} is {dtype} {_dims(c.dims)}, the contract says {t.config_dtype} {list(t.dims)}"
            )
        if kind == "input" and bool(getattr(c, "optional", False)) != t.optional:
            raise RepositoryError(f"{model}: input {name} optional={c.optional}, the contract says {t.optional}")


def _check_graph_io(
    model: str, kind: str, tensors: Sequence[mc.ModelInput] | Sequence[mc.ModelOutput], specs: Sequence[TensorSpec]
) -> None:
    got = {t.name: t for t in tensors}
    want = {t.name: t for t in specs}
    if set(got) != set(want):
        raise RepositoryError(f"{model}: {kind}s {sorted(got)} differ from the graph's {sorted(want)} (ttscore/contract/)")
    for name, ts in want.items():
        c = got[name]
        dtype = mc.DataType.Name(c.data_type)
        if dtype != SPEC_DTYPES[ts.dtype]:
            raise RepositoryError(f"{model}: {kind} {name} is {dtype}, the graph has {ts.dtype}")
        per_request = list(ts.dims[1:])  # drop the batch axis (Triton's, or the model's batch of one)
        dims = _dims(c.dims)
        if not per_request:
            ok = dims == [1]
        else:
            ok = len(dims) == len(per_request) and all(
                (d == -1 or d > 0) if isinstance(s, str) else d == s for d, s in zip(dims, per_request, strict=True)
            )
        if not ok:
            raise RepositoryError(f"{model}: {kind} {name} dims {dims} do not fit the graph's {list(ts.dims)}")


def graph_spec_for(model: str) -> GraphSpec | None:
    """The exported graph a model hosts, with deployment-dependent sizes left symbolic (its family's
    declaration, ttscore.backend.families)."""
    declared = families.triton_model(model)
    return declared.graph if declared is not None else None


def vocoder_state_key(model: str) -> str | None:
    """A streaming vocoder model's Manifest attribute with its state size (its state / new_state dims
    must fit it); None for any other model."""
    declared = families.triton_model(model)
    return declared.state_key if declared is not None else None


def add_external_inputs(config: mc.ModelConfig) -> None:
    """speech_generation's inputs that only external family packages take (ttscore.contract.plugins),
    added to its committed config from the contract table: such a family cannot edit the config."""
    external = {m.WIRE.family for m in plugins.layer_modules("contract") if hasattr(m, "WIRE")}
    have = {t.name for t in config.input}
    for row in triton_io.SPEECH_INPUTS:
        if row.name not in have and set(row.families) <= external:
            config.input.append(mc.ModelInput(name=row.name, data_type=mc.DataType.Value(row.config_dtype),
                                              dims=list(row.dims), optional=row.optional))


def check_config(config: mc.ModelConfig, state_size: int | None = None) -> None:
    """Contract checks of one model config (see the module docstring)."""
    name = config.name
    if name in triton_io.PUBLIC_MODELS:
        inputs, outputs = triton_io.PUBLIC_MODELS[name]
        _check_io(name, "input", config.input, inputs)
        _check_io(name, "output", config.output, outputs)
    graph = graph_spec_for(name)
    if graph is not None:
        _check_graph_io(name, "input", config.input, graph.inputs)
        _check_graph_io(name, "output", config.output, graph.outputs)
    if name == "speech_generation":
        if not config.model_transaction_policy.decoupled:
            raise RepositoryError("speech_generation must be decoupled")
        if config.max_batch_size != 0:
            raise RepositoryError("speech_generation must have max_batch_size 0 (the generator batches)")
    if vocoder_state_key(name) is not None and state_size is not None:
        for t in (*config.input, *config.output):
            if t.name in ("state", "new_state") and _dims(t.dims) not in ([-1], [state_size]):
                raise RepositoryError(f"{name}: {t.name} dims {_dims(t.dims)} != manifest state_size {state_size}")


def check_ensembles(configs: Mapping[str, mc.ModelConfig]) -> None:
    for name, config in configs.items():
        if config.platform != "ensemble":
            continue
        for step in config.ensemble_scheduling.step:
            target = configs.get(step.model_name)
            if target is None:
                raise RepositoryError(f"{name}: step model {step.model_name!r} is not in the rendered repository")
            inputs = {t.name for t in target.input}
            outputs = {t.name for t in target.output}
            for key in step.input_map:
                if key not in inputs:
                    raise RepositoryError(f"{name}: {step.model_name} has no input {key!r}")
            for key in step.output_map:
                if key not in outputs:
                    raise RepositoryError(f"{name}: {step.model_name} has no output {key!r}")


# --- applying settings --------------------------------------------------------------------------


def apply_settings(config: mc.ModelConfig, settings: ModelSettings) -> mc.ModelConfig:
    """A copy of `config` with the deployment settings applied; refuses what does not fit it."""
    out = mc.ModelConfig()
    out.CopyFrom(config)
    name = config.name
    is_ensemble = config.platform == "ensemble"
    if is_ensemble and (settings.instances or settings.kind or settings.max_batch_size or settings.parameters):
        raise RepositoryError(f"{name} is an ensemble: it has no instances, batching or parameters to set")
    if settings.instances is not None or settings.kind is not None:
        if len(out.instance_group) != 1:
            raise RepositoryError(f"{name}: expected exactly one instance_group to adjust")
        group = out.instance_group[0]
        if settings.instances is not None:
            group.count = settings.instances
        if settings.kind is not None:
            group.kind = mc.ModelInstanceGroup.Kind.Value(KINDS[settings.kind])
    if settings.max_batch_size is not None:
        if config.max_batch_size == 0:
            raise RepositoryError(f"{name} does not batch (max_batch_size 0 is part of its contract)")
        out.max_batch_size = settings.max_batch_size
    if settings.max_queue_delay_us is not None or settings.preferred_batch_sizes is not None:
        if not config.HasField("dynamic_batching"):
            raise RepositoryError(f"{name} has no dynamic_batching to adjust")
        if settings.max_queue_delay_us is not None:
            out.dynamic_batching.max_queue_delay_microseconds = settings.max_queue_delay_us
        if settings.preferred_batch_sizes is not None:
            del out.dynamic_batching.preferred_batch_size[:]
            out.dynamic_batching.preferred_batch_size.extend(settings.preferred_batch_sizes)
    for key, value in settings.parameters.items():
        if key not in config.parameters:
            known = ", ".join(sorted(config.parameters)) or "none"
            raise RepositoryError(f"{name}: unknown parameter {key!r} (declared in config.pbtxt: {known})")
        out.parameters[key].string_value = value
    if out.max_batch_size and out.dynamic_batching.preferred_batch_size:
        too_big = [b for b in out.dynamic_batching.preferred_batch_size if b > out.max_batch_size]
        if too_big:
            raise RepositoryError(f"{name}: preferred batch sizes {too_big} exceed max_batch_size {out.max_batch_size}")
    return out


def _manifest_state_size(model: str, artifacts_dir: str | None) -> int | None:
    key = vocoder_state_key(model)
    if key is None or not artifacts_dir:
        return None
    if not (Path(artifacts_dir) / MANIFEST).is_file():  # e.g. a container path that only exists inside the image
        return None
    try:
        size: int | None = getattr(read_manifest(artifacts_dir), key)
        return size
    except ArtifactError:
        return None


def render_repository(
    out: Path | str,
    settings: Mapping[str, ModelSettings | Mapping[str, Any]] | None = None,
    *,
    artifacts_dir: Path | str | None = None,
    models: Sequence[str] | None = None,
    source: Path | str = SOURCE_REPOSITORY,
    aliases: Mapping[str, str] | None = None,
) -> Path:
    """Write a build copy of `source` (only `models` if given) with `settings` applied to `out`.

    `artifacts_dir` sets the `artifacts_dir` parameter of every model that declares one (a
    per-model `parameters.artifacts_dir` wins). `aliases` maps extra model names to a committed
    model they are rendered from (e.g. one speech_generation per served checkpoint). `out` is
    replaced entirely.
    """
    src = Path(source)
    available = committed_models(src)
    for alias, origin in (aliases or {}).items():
        if origin not in available:
            raise RepositoryError(f"alias {alias!r} names unknown model {origin!r}")
        if alias in available:
            raise RepositoryError(f"alias {alias!r} clashes with a committed model")
        available[alias] = available[origin]
    selected = list(available) if models is None else list(dict.fromkeys(models))
    missing = [m for m in selected if m not in available]
    if missing:
        raise RepositoryError(f"unknown model(s) {', '.join(missing)} (available: {', '.join(available)})")
    parsed: dict[str, ModelSettings] = {}
    for name, value in (settings or {}).items():
        if name not in available:
            raise RepositoryError(f"settings for unknown model {name!r} (available: {', '.join(available)})")
        parsed[name] = value if isinstance(value, ModelSettings) else ModelSettings.parse(name, value)
    unselected = sorted(set(parsed) - set(selected))
    if unselected:
        raise RepositoryError(f"settings given for model(s) not rendered: {', '.join(unselected)}")

    configs: dict[str, mc.ModelConfig] = {}
    for name in selected:
        config = load_config(available[name] / "config.pbtxt")
        if config.name == "speech_generation":
            add_external_inputs(config)
        model_settings = parsed.get(name, ModelSettings())
        if artifacts_dir is not None and "artifacts_dir" in config.parameters:
            params = {"artifacts_dir": str(artifacts_dir), **model_settings.parameters}
            model_settings = ModelSettings(
                **{**model_settings.__dict__, "parameters": params}  # frozen dataclass: rebuild
            )
        config = apply_settings(config, model_settings)
        state_dir = config.parameters["artifacts_dir"].string_value if "artifacts_dir" in config.parameters else None
        check_config(config, _manifest_state_size(config.name, state_dir))  # under the committed model's name
        config.name = name
        configs[name] = config
    check_ensembles(configs)

    dest = Path(out)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name, config in configs.items():
        shutil.copytree(
            available[name],
            dest / name,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "config.pbtxt"),
        )
        header = f"# Rendered by ttscore.backend.repository from model_repository/{name}/config.pbtxt; do not edit.\n"
        (dest / name / "config.pbtxt").write_text(header + text_format.MessageToString(config), encoding="utf-8")
    return dest


# --- CLI ----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ttscore.backend.repository", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output model repository (replaced)")
    parser.add_argument("--artifacts-dir", help="artifacts directory as the server will see it")
    parser.add_argument("--settings", help='JSON file: {"artifacts_dir": ..., "models": {name: {...}}}')
    parser.add_argument("--set", action="append", default=[], metavar="MODEL.KEY=VALUE")
    parser.add_argument("--models", nargs="+", help="render only these models")
    parser.add_argument("--source", default=str(SOURCE_REPOSITORY))
    args = parser.parse_args(argv)
    try:
        raw: dict[str, Any] = {"models": {}}
        if args.settings:
            raw = json.loads(Path(args.settings).read_text(encoding="utf-8"))
        models_raw: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (raw.get("models") or {}).items()}
        for assignment in args.set:
            model, key, value = parse_assignment(assignment)
            target = models_raw.setdefault(model, {})
            if key.startswith("parameters."):
                target.setdefault("parameters", {})[key.split(".", 1)[1]] = value
            else:
                target[key] = value
        parsed, artifacts = parse_settings({**raw, "models": models_raw})
        out = render_repository(
            args.out, parsed, artifacts_dir=args.artifacts_dir or artifacts, models=args.models, source=args.source
        )
    except (RepositoryError, json.JSONDecodeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
