"""Where the suite's time goes: every fixture's own setup time, beside pytest's per-test durations.

pytest's `--durations` charges a session fixture to the first test that asks for it, under that test's
"setup", so an export shared by forty tests looks like one slow test. This plugin times each fixture's
own setup (its dependencies are set up before `pytest_fixture_setup` runs for it, so they are not
counted twice) and, with `TTS_TEST_TIMINGS=FILE`, writes a JSON report at the end of the session:
fixtures (name, scope, where, seconds) and tests (nodeid, setup/call/teardown seconds). Without the
variable it only prints the slowest fixtures with `--durations`. tests/README.md's table is made from
this report by `python tests/timing.py REPORT [OTHER]`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

REPORT_ENV = "TTS_TEST_TIMINGS"
_fixtures: list[dict[str, Any]] = []
_tests: dict[str, dict[str, float]] = defaultdict(dict)
_started = time.monotonic()


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: Any) -> Any:
    t0 = time.perf_counter()
    yield
    elapsed = time.perf_counter() - t0
    if fixturedef.scope != "function" or elapsed >= 0.5:
        func = fixturedef.func
        where = f"{Path(func.__code__.co_filename).name}:{func.__code__.co_firstlineno}"
        _fixtures.append({"name": fixturedef.argname, "scope": fixturedef.scope, "where": where,
                          "seconds": round(elapsed, 3), "first_test": request.node.nodeid})


def pytest_runtest_logreport(report: Any) -> None:
    _tests[report.nodeid][report.when] = round(report.duration, 3)


PARTS_ENV = "_TTS_TIMING_PARTS"  # where xdist workers leave their fixtures for the controller


def pytest_configure(config: Any) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the controller (or a run without xdist): before workers start
        os.environ[PARTS_ENV] = tempfile.mkdtemp(prefix="tts-timing-")


def pytest_sessionfinish(session: Any) -> None:
    worker, parts = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get(PARTS_ENV)
    if worker and parts and Path(parts).is_dir():
        (Path(parts) / f"{worker}.json").write_text(json.dumps(_fixtures))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker's part goes through pytest_sessionfinish
        return
    wall = time.monotonic() - _started
    parts = os.environ.get(PARTS_ENV)
    if parts and Path(parts).is_dir():
        for part in sorted(Path(parts).glob("*.json")):
            _fixtures.extend({**f, "worker": part.stem} for f in json.loads(part.read_text()))
        shutil.rmtree(parts, ignore_errors=True)
    path = os.environ.get(REPORT_ENV)
    if path:
        Path(path).write_text(json.dumps({"wall_s": round(wall, 1), "fixtures": _fixtures,
                                          "tests": _tests}, indent=1))
    if config.getoption("durations", None) is None:
        return
    top = sorted(_fixtures, key=lambda f: -f["seconds"])[:15]
    terminalreporter.write_sep("=", "slowest fixture setups (own time; tests/timing.py)")
    for f in top:
        terminalreporter.write_line(f"{f['seconds']:8.2f}s {f['scope']:<8} {f['name']} ({f['where']})")


# --- the table ---------------------------------------------------------------------------------------


def _rows(report: dict[str, Any], n: int) -> list[tuple[float, str, str]]:
    rows = [(f["seconds"], "fixture", f"{f['name']} ({f['scope']}, {f['where']})") for f in report["fixtures"]]
    for nodeid, phases in report["tests"].items():
        rows.append((phases.get("call", 0.0), "test", nodeid))
    return sorted(rows, reverse=True)[:n]


def table(report_path: str, n: int = 30) -> str:
    report = json.loads(Path(report_path).read_text())
    total_fixture = sum(f["seconds"] for f in report["fixtures"])
    total_call = sum(p.get("call", 0.0) for p in report["tests"].values())
    lines = [f"pytest wall {report['wall_s']:.0f} s; {len(report['tests'])} tests; fixture setups "
             f"{total_fixture:.0f} s; test bodies {total_call:.0f} s", "",
             "| seconds | kind | what |", "|---:|---|---|"]
    lines += [f"| {s:.1f} | {k} | `{w}` |" for s, k, w in _rows(report, n)]
    return "\n".join(lines)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(f"### {arg}\n")
        print(table(arg))
        print()
