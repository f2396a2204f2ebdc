"""Running an exporter's stages and writing what an export holds besides its graphs.

`StageRunner` is the stage loop every family's exporter shares: each stage is announced as it starts (logged,
and "step i of n" to the CLI's progress line), its peak memory is measured (export.memory: the manifest's
`export.stages`), the graphs' validation reports are collected, and the manifest gets them with the family's
name, the source record, the memory summary and the exporting stack's versions. `save_table`, `copy_files` and
`json_configs` write an export's tables and tokenizer files and read the configurations its manifest records.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from export.memory import MemoryMonitor
from export.tracing import versions
from ttscore.contract.manifest import build_manifest

logger = logging.getLogger(__name__)

MANIFEST_STAGE = "manifest"


def quantization_stage(precision: str) -> str:
    """The label of an export's quantization stage (`--precision int8|int4`)."""
    return f"{precision} quantization"


class StageRunner:
    """One export's stages, run in order in one process (use as a context manager around the stages).

    `stages`: the labels of the export's stages, for people; a quantized `precision` adds its quantization
    stage, and every export ends with the manifest stage, announced as the block ends. `family` and `source`
    (export.exporter.source_record) go into the manifest as they are. `reports`: the validation report of each
    graph by name; `memory`: the memory summary, once the block has ended."""

    def __init__(self, stages: Sequence[str], progress: Callable[[int, int, str], None] | None,
                 precision: str = "fp32", *, family: str, source: Mapping[str, Any]) -> None:
        self.labels = [*stages, *([quantization_stage(precision)] if precision != "fp32" else []), MANIFEST_STAGE]
        self.progress = progress
        self.precision = precision
        self.family = family
        self.source = source
        self.reports: dict[str, Any] = {}
        self.memory: dict[str, Any] = {}
        self._monitor = MemoryMonitor()

    def __enter__(self) -> StageRunner:
        self._monitor.__enter__()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._monitor.__exit__(exc_type, *exc)
        if exc_type is None:
            self.memory = self._monitor.summary()
            self.announce(MANIFEST_STAGE)

    def announce(self, label: str) -> None:
        """Log the stage `label` and report it as "step i of n" to the progress hook."""
        logger.info("export stage: %s", label)
        if self.progress is not None:
            self.progress(self.labels.index(label) + 1, len(self.labels), label)

    @contextmanager
    def stage(self, label: str, measured: str | None = None) -> Iterator[dict[str, float]]:
        """Announce the stage `label` and measure its memory, recorded under `measured` (by default the label
        with underscores for spaces)."""
        self.announce(label)
        with self._monitor.stage(measured or label.replace(" ", "_")) as record:
            yield record

    def graph(self, label: str, export: Callable[[], dict[str, Any]], name: str | None = None) -> None:
        """The stage `label` that exports the graph `name` (by default the label with underscores for spaces):
        `export()` returns its validation report, recorded under that name; the stage is measured under it too."""
        name = name or label.replace(" ", "_")
        with self.stage(label, name):
            self.reports[name] = export()

    def measure(self, name: str) -> Any:
        """Measure the memory of a part of the current stage under `name`, without announcing a stage."""
        return self._monitor.stage(name)

    def quantize(self, graphs: Iterable[str], quantize: Callable[[str], dict[str, Any]]) -> None:
        """For a quantized precision, the quantization stage: `quantize(graph)` of each graph in turn (each
        measured as `<precision>_<graph>`), its fields added to the graph's report; nothing for fp32."""
        if self.precision == "fp32":
            return
        self.announce(quantization_stage(self.precision))
        for name in graphs:
            with self._monitor.stage(f"{self.precision}_{name}"):
                self.reports[name] = {**self.reports[name], **quantize(name)}

    def manifest(self, out: Path, variant: str = "base", **fields: Any) -> dict[str, Any]:
        """The export's manifest (ttscore.contract.manifest.build_manifest) of the runner's family and source at
        its precision, with the stages' validation reports, their memory and the exporting stack's versions."""
        return build_manifest(out, family=self.family, source=self.source, variant=variant, precision=self.precision,
                              validation=self.reports, memory=self.memory, versions=versions(), **fields)


def model_size(width: int, real_width: int = 1024) -> str:
    """The manifest's `model_size` of a checkpoint whose model width is `width`: "real" from `real_width` on,
    else "tiny" (a make-tiny checkpoint)."""
    return "real" if width >= real_width else "tiny"


def json_configs(src: Path, *names: str) -> dict[str, Any]:
    """The JSON configuration files `names` of the checkpoint `src`, parsed, by name (the manifest's `configs`)."""
    return {name: json.loads((src / name).read_text(encoding="utf-8")) for name in names}


def save_table(out: Path, name: str, array: Any, tables: dict[str, Any]) -> None:
    """Write the table `name` (`<name>.npy`) into the export `out` and record its shape in `tables` (the
    manifest's `tables`)."""
    import numpy as np

    np.save(out / f"{name}.npy", array)
    tables[name] = {"shape": list(array.shape)}


def save_tables(out: Path, get: Callable[[str], Any], names: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """Write the tables of the pairs (table, checkpoint tensor) `names` into the export `out`, each the float32
    torch tensor `get(tensor)` (e.g. export.weights.CheckpointTensors.get); returns the manifest's `tables`."""
    tables: dict[str, Any] = {}
    for name, tensor in names:
        save_table(out, name, get(tensor).numpy(), tables)
    return tables


def copy_files(src: Path, dst: Path, names: Iterable[str]) -> None:
    """Copy the files `names` that the checkpoint `src` has into the export's folder `dst` (a tokenizer's)."""
    dst.mkdir(exist_ok=True)
    for name in names:
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)
