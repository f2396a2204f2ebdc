# Two commands do everything on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The second reference environment: transformers 5.x for the references that need it (README
# "Reference environments"; tests/refenv.py runs a family's reference in its environment).
REF5 := .venv-ref5
REF5_STAMP := $(REF5)/.installed
# The third: mlx-audio on mlx's CPU build, MOSS-TTS-Nano's reference (no torch).
MLX := .venv-mlx
MLX_STAMP := $(MLX)/.installed
# The fourth: pipecat-ai, a voice-agent framework that drives the ElevenLabs dialect (its pins differ from .venv's).
PIPECAT := .venv-pipecat
PIPECAT_STAMP := $(PIPECAT)/.installed
DEMO_DIR ?= build/demo
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup demo say-demo test test-fast lint clean

setup: $(STAMP) $(REF5_STAMP) $(MLX_STAMP) $(PIPECAT_STAMP)

$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml
	@command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  { dpkg -s libb64-0d libsndfile1 curl >/dev/null 2>&1 || \
	    { apt-get update -qq && apt-get install -y -qq libb64-0d libsndfile1 curl >/dev/null; }; } || true
	@# Debian's chromium for the playground's browser test (playwright drives it; it never downloads one).
	@command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  { dpkg -s chromium fonts-dejavu-core >/dev/null 2>&1 || \
	    { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; }; } || true
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	$(PY) -m pip install -q --no-deps -e .
	@# numba compiles librosa's vectorized helpers (librosa.util.utils; `import librosa.util` alone is lazy) into
	@# their cache on first import (~15 s): once, here.
	$(PY) -c "import librosa.util.utils"
	touch $(STAMP)

# Only what the references need (no project install: tests/refenv.py puts the checkout on PYTHONPATH).
$(REF5_STAMP): requirements-ref5.txt requirements-ref5-sources.txt
	test -x $(REF5)/bin/python || $(PYTHON) -m venv $(REF5)
	$(REF5)/bin/python -m pip install -q -r requirements-ref5.txt
	$(REF5)/bin/python -m pip download -q --no-deps -d $(REF5)/wheels -r requirements-ref5-sources.txt
	touch $(REF5_STAMP)

$(MLX_STAMP): requirements-mlx.txt
	test -x $(MLX)/bin/python || $(PYTHON) -m venv $(MLX)
	$(MLX)/bin/python -m pip install -q -r requirements-mlx.txt
	@# mlx-audio's reference needs no torch: a second torch build here would be a dependency gone wrong.
	$(MLX)/bin/python -c "import importlib.util as u, sys; sys.exit('torch in $(MLX)' if u.find_spec('torch') else 0)"
	touch $(MLX_STAMP)

$(PIPECAT_STAMP): requirements-pipecat.txt
	test -x $(PIPECAT)/bin/python || $(PYTHON) -m venv $(PIPECAT)
	$(PIPECAT)/bin/python -m pip install -q -r requirements-pipecat.txt
	$(PIPECAT)/bin/python -c "import importlib.util as u, sys; sys.exit('torch in $(PIPECAT)' if u.find_spec('torch') else 0)"
	touch $(PIPECAT_STAMP)

# Serve the tiny random-weight demo checkpoint: Triton (8000/8001/8002) + Speech API (8091).
# Pass your own: make demo CHECKPOINTS="--checkpoint /path/to/Qwen3-TTS-12Hz-0.6B-CustomVoice"
demo: $(STAMP)
	$(VENV)/bin/triton-tts serve $(CHECKPOINTS)

# Offline synthesis without servers: tiny checkpoint -> export -> WAV.
say-demo: $(STAMP)
	$(VENV)/bin/triton-tts make-tiny --variant custom_voice --out $(DEMO_DIR)/checkpoint-custom_voice
	$(VENV)/bin/triton-tts say --checkpoint $(DEMO_DIR)/checkpoint-custom_voice --voice vivian \
	  --language English --max-new-tokens 40 --seed 7 -o $(DEMO_DIR)/hello.wav "Hello from Triton TTS."

# Two workers, each running whole test modules (--dist loadfile): the suite waits on subprocesses
# (tritonserver, references, the gateway) about half the time, so two keep both cores busy; exports are
# shared through tests/artifacts.py's store (one builds, the other reuses). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
test: $(STAMP) $(REF5_STAMP) $(MLX_STAMP) $(PIPECAT_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy ttscore gateway export triton_tts
	$(VENV)/bin/mypy --strict ttscore/contract ttscore/runtime
	$(VENV)/bin/lint-imports
	TTS_REQUIRE_REFERENCES=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25

# The inner loop: unit, fake-backend gateway and python-backend-model tests; nothing that exports a
# checkpoint, starts tritonserver or runs a reference (tests/conftest.py marks those `artifacts`).
FAST := not (integration or export or parity or slow or gpu or artifacts)
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "$(FAST)"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy ttscore gateway export triton_tts
	$(VENV)/bin/mypy --strict ttscore/contract ttscore/runtime
	$(VENV)/bin/lint-imports

clean:
	rm -rf build .pytest_cache  # build/test-cache: the tests' artifact store (tests/artifacts.py)
