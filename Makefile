# longformer-fs: set-up, tests, the demo and the paper's training recipes.
#
#   make demo      the main job: the 5-phase character-LM recipe at toy scale on a
#                  generated corpus (no download; about 2 minutes on 2 cores)
#   make install   create .venv/ with pinned dependencies (a no-op when up to date)
#   make test      install if needed, then run the test suite
#   make test-fast the suite without its slow tests (journeys, cold lane, toy report, miniature tables)
#   make test-durations  the whole suite, recording each module's seconds in tests/durations.json
#                  (make test starts the longest modules first, by that file)
#   make info      print versions and the attention backends available here
#   make lint      ruff (lint + format check) and clang-format --dry-run; CI runs it
#   make gpu-bundle  the wheels the project's lent GPU machine lacks, into .gpu/ (docs/gpus.md)
#   make format    apply ruff's fixes and formatting, and clang-format
#   make text8-phase1 ... text8-phase5, enwik8-phase1 ... enwik8-phase5
#                  one phase of the paper's character-LM recipe (recipes/char_lm/)
#   make eval-bpc CKPT=path/checkpoint_last.pt CORPUS=text8 [SPLIT=test]
#                  test BPC with the paper's protocol (windows of 32256, step 512)
#   make text8 / make enwik8
#                  all five phases in order; each starts from the previous phase's
#                  last checkpoint with a fresh optimizer; rerunning resumes
#   make summarize-arxiv BART=dir DATA=dir GPT2=dir [LED_SIZE=large|base]
#                  LED on arXiv-style summarization (recipes/summarization/): converts BART once
#                  (longformer-fs convert-bart), trains, summarizes the test split, prints ROUGE
#   make mlm-base ROBERTA=dir DATA=dir / make mlm-large ...
#                  continued MLM pretraining at 4,096 tokens (recipes/mlm/): converts the
#                  RoBERTa checkpoint once (longformer-fs convert-roberta), then trains;
#                  rerunning resumes
#   make finetune-imdb / finetune-hyperpartisan / finetune-triviaqa / finetune-wikihop /
#        finetune-hotpotqa / finetune-coref  MODEL=path/model.pt DATA=dir [SEEDS=5]
#                  fine-tuning on a long-document task (recipes/finetune/), the schedule fitted
#                  to DATA's size (from longformer-fs prep classification|qa|wikihop|hotpotqa|
#                  coref); prints the best dev accuracy/F1 (mean and std over SEEDS), or the
#                  task's own evaluation (eval-qa, eval-hotpotqa, eval-coref) of each run
#   make finetune-hotpotqa-two-stage MODEL=... DATA=dir HOTPOT_TRAIN=json HOTPOT_VALID=json GPT2=dir
#                  HotpotQA's two-stage variant: evidence model, then answers from its paragraphs
#
# Variables:
#   PYTHON=python3        interpreter used to create the venv
#   TORCH=auto            `auto` keeps a torch that $(PYTHON) can already import (for example
#                         a CUDA build on a GPU machine) and otherwise installs $(TORCH_PIN);
#                         any other value is a pip requirement to install instead,
#                         e.g. TORCH="torch==2.13.0 --index-url <your CUDA index>"
#   PYTEST_ARGS=...       extra arguments for pytest, e.g. PYTEST_ARGS="-k chunks -x"
#   TEST_WORKERS=auto     pytest-xdist processes for make test (auto: one per core; 0: none, which
#                         -s needs to show what tests print)
#   SIZE=small|large      character-LM model size (default small)
#   DATA=data-bin         directory holding text8/ and enwik8/ from `longformer-fs prep`
#   SAVE=checkpoints/char_lm   checkpoints go to SAVE/<corpus>/<size>/phaseN
#   HYDRA_ARGS=...        extra Hydra overrides, e.g. HYDRA_ARGS="dataset.batch_size=4"
#   NPROC=1               processes per node for the training targets: NPROC>1 runs them under
#                         torchrun through longformer_fs.launch (fairseq's DDP; gloo on CPU)
#   TORCHRUN_ARGS=...     more torchrun options, e.g. for several nodes:
#                         TORCHRUN_ARGS="--nnodes 4 --node-rank 0 --rdzv-endpoint host:29500"
#   ROBERTA=dir           a RoBERTa for mlm-base / mlm-large: fairseq's (model.pt + dict.txt) or HF's
#                         (config.json, weights, vocab.json + merges.txt)
#   MLM_SAVE=checkpoints/mlm   MLM runs go to MLM_SAVE/<size>_4096 (converted model in converted/)
#   BART=dir              a BART (fairseq's or HF's layout) or an LED from longformer-fs import-hf,
#                         for summarize-arxiv
#   GPT2=dir              GPT-2's encoder.json and vocab.bpe (to turn summaries into text; an import-hf
#                         or HF-layout convert-bart output directory has them)
#   SUM_SAVE=checkpoints/summarization   LED runs go to SUM_SAVE/<size>_16k
#   CONVERT_ARGS=...      convert-bart options (default: 16384 source positions, window 512)
#   MODEL=path/model.pt   a longformer_roberta checkpoint to fine-tune (from import-hf, convert-roberta or
#                         an MLM run; its dict.txt, when one is beside it, must be DATA's); the recipe
#                         takes its architecture, sizes, window and positions
#   FT_SAVE=checkpoints/finetune   fine-tuning runs go to FT_SAVE/<task>[/seedK]
#   SEEDS=1               fine-tuning runs with seeds 1..SEEDS (the paper: 5 for Hyperpartisan)
#   SUMMARIZE_ARGS=...    generation options, default "--min-len 100 --max-len 512" (beam 4,
#                         length penalty 2.0, no repeated 3-grams: longformer-fs summarize --help)

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
TORCH ?= auto
TORCH_PIN := torch==2.13.0
FAIRSEQ_PIN := fairseq-fixed==0.12.3.1
PYTEST_ARGS ?=
TEST_WORKERS ?= auto

PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
STAMP := $(VENV)/.installed
INSTALL_INPUTS := Makefile setup.py pyproject.toml requirements.txt requirements-test.txt requirements-onnx.txt \
	constraints.txt \
	$(shell find cuda_ext -name '*.cpp' -o -name '*.cu' -o -name '*.h')

# With TORCH=auto, a torch installed for $(PYTHON) is kept. Its version is read from its
# metadata, not by importing it (seconds), and only by the install recipe (these are
# expanded where used): every other target starts at once.
SYSTEM_TORCH = $(if $(filter auto,$(TORCH)),$(shell $(PYTHON) -c \
	"import importlib.metadata as m; print(m.version('torch'))" 2>/dev/null))
VENV_FLAGS = $(if $(SYSTEM_TORCH),--system-site-packages)
TORCH_REQ = $(if $(filter auto,$(TORCH)),$(if $(SYSTEM_TORCH),,$(TORCH_PIN)),$(TORCH))

NPROC ?= 1
TORCHRUN_ARGS ?=
# fairseq-hydra-train, in NPROC processes when asked, through longformer_fs/launch.py, which
# also ends a finished run cleanly (fairseq alone may abort at exit after training stops mid-epoch).
ifeq ($(NPROC),1)
HYDRA_TRAIN = $(PY) -m longformer_fs.launch fairseq-hydra-train
else
HYDRA_TRAIN = $(VENV)/bin/torchrun --nproc_per_node $(NPROC) $(TORCHRUN_ARGS) -m longformer_fs.launch fairseq-hydra-train
endif

# The fine-tuning recipes: the keys of longformer_fs/recipes.py's FINETUNE table.
FINETUNE_TASKS := $(shell sed -n 's/^    "\([a-z_]*\)": FinetuneRecipe.*/\1/p' longformer_fs/recipes.py)

SIZE ?= small
DATA ?= data-bin
SAVE ?= checkpoints/char_lm
HYDRA_ARGS ?=
CORPORA := text8 enwik8
PHASES := 1 2 3 4 5

.PHONY: help install test test-fast test-durations lint format info demo clean-venv gpu-bundle eval-bpc mlm-base mlm-large summarize-arxiv $(CORPORA) \
	$(foreach t,$(FINETUNE_TASKS),finetune-$(t)) finetune-hotpotqa-two-stage \
	$(foreach c,$(CORPORA),$(foreach p,$(PHASES),$(c)-phase$(p)))

help:
	@# The comment block at the top of this file, up to its first blank line.
	@awk 'NR > 2 && /^#/ { sub(/^# ?/, ""); print; next } NR > 2 { exit }' Makefile

# One phase: $(1) corpus, $(2) phase, $(3) previous phase (empty for phase 1).
# ($$$$ is a shell $: this text is expanded twice, by call and by eval.)
define char_lm_phase
$(1)-phase$(2): $(STAMP)
	@test -f $(DATA)/$(1)/dict.txt || { echo "error: $(DATA)/$(1) has no prepared data; run:" \
		"longformer-fs prep $(1) --out $(DATA)/$(1) --download (or --zip PATH)"; exit 2; }
	@prev="$(3)"; here=$(SAVE)/$(1)/$(SIZE); \
	if [ -n "$$$$prev" ] && [ ! -f $$$$here/phase$(2)/checkpoint_last.pt ] \
		&& [ ! -f $$$$here/phase$$$$prev/checkpoint_last.pt ]; then \
		echo "error: phase $(2) starts from $$$$here/phase$$$$prev/checkpoint_last.pt, which does not exist;" \
			"run 'make $(1)-phase$$$$prev SIZE=$(SIZE)' first"; exit 2; fi
	$(HYDRA_TRAIN) --config-dir recipes/char_lm --config-name $(SIZE)_phase$(2) \
		task.data=$(abspath $(DATA)/$(1)) checkpoint.save_dir=$(abspath $(SAVE)/$(1)/$(SIZE)/phase$(2)) \
		$(if $(3),checkpoint.finetune_from_model=$(abspath $(SAVE)/$(1)/$(SIZE)/phase$(3)/checkpoint_last.pt)) \
		$(HYDRA_ARGS)
endef
$(foreach c,$(CORPORA),$(eval $(call char_lm_phase,$(c),1,)))
$(foreach c,$(CORPORA),$(foreach p,2 3 4 5,$(eval $(call char_lm_phase,$(c),$(p),$(word $(p),0 1 2 3 4)))))

CKPT ?=
CORPUS ?= text8
SPLIT ?= test
EVAL_ARGS ?=
eval-bpc: $(STAMP)
	@test -n "$(CKPT)" || { echo "error: set CKPT=path/to/checkpoint.pt"; exit 2; }
	$(VENV)/bin/longformer-fs eval-bpc $(CKPT) --data $(DATA)/$(CORPUS) --split $(SPLIT) $(EVAL_ARGS)

# A whole chain. fairseq resumes a phase from its checkpoint_last.pt (and then ignores
# finetune_from_model), so rerunning the chain continues where it stopped.
$(CORPORA):
	@for p in $(PHASES); do $(MAKE) --no-print-directory $@-phase$$p || exit $$?; done

# Continued MLM pretraining: $(1) is base or large. ($$$$ as above.)
ROBERTA ?=
MLM_SAVE ?= checkpoints/mlm
define mlm_run
mlm-$(1): $(STAMP)
	@test -f $(DATA)/dict.txt || { echo "error: DATA=$(DATA) is not a binarized MLM dataset (no dict.txt);" \
		"build one with longformer-fs prep docs"; exit 2; }
	@conv=$(MLM_SAVE)/$(1)_4096/converted; \
	if [ ! -f $$$$conv/model.pt ]; then \
		test -n "$(ROBERTA)" || { echo "error: set ROBERTA=dir holding a RoBERTa-$(1) (fairseq or HF layout)"; \
			exit 2; }; \
		$(VENV)/bin/longformer-fs convert-roberta $(ROBERTA) --out $$$$conv || exit $$$$?; fi; \
	cmp -s $(DATA)/dict.txt $$$$conv/dict.txt || { echo "error: $(DATA)/dict.txt differs from the model's" \
		"$$$$conv/dict.txt; binarize the corpus with RoBERTa's dictionary"; exit 2; }
	$(HYDRA_TRAIN) --config-dir recipes/mlm --config-name longformer_$(1)_4096 \
		task.data=$(abspath $(DATA)) checkpoint.save_dir=$(abspath $(MLM_SAVE)/$(1)_4096) \
		checkpoint.finetune_from_model=$(abspath $(MLM_SAVE)/$(1)_4096/converted/model.pt) $(HYDRA_ARGS)
endef
$(foreach s,base large,$(eval $(call mlm_run,$(s))))

# LED summarization (paper v2 §7): convert once, train, summarize the test split, score it.
LED_SIZE ?= large
SUM_SAVE ?= checkpoints/summarization
GPT2 ?=
SUMMARIZE_ARGS ?= --min-len 100 --max-len 512
CONVERT_ARGS ?=
summarize-arxiv: $(STAMP)
	@test -f $(DATA)/dict.source.txt || { echo "error: DATA=$(DATA) is not a summarization dataset (no" \
		"dict.source.txt); build one with longformer-fs prep summarization --format arxiv"; exit 2; }
	@test -f $(GPT2)/encoder.json -a -f $(GPT2)/vocab.bpe || { echo "error: set GPT2=dir holding GPT-2's" \
		"encoder.json and vocab.bpe (to turn the summaries into text)"; exit 2; }
	@conv=$(SUM_SAVE)/$(LED_SIZE)_16k/converted; \
	if [ ! -f $$conv/model.pt ]; then \
		test -n "$(BART)" || { echo "error: set BART=dir holding a BART-$(LED_SIZE) (fairseq or HF layout)" \
			"or an imported LED"; exit 2; }; \
		$(VENV)/bin/longformer-fs convert-bart $(BART) --out $$conv $(CONVERT_ARGS) || exit $$?; fi; \
	cmp -s $(DATA)/dict.source.txt $$conv/dict.txt || { echo "error: $(DATA)/dict.source.txt differs from the" \
		"model's $$conv/dict.txt; prepare the data with BART's dictionary"; exit 2; }
	$(HYDRA_TRAIN) --config-dir recipes/summarization --config-name led_$(LED_SIZE)_16k \
		task.data=$(abspath $(DATA)) checkpoint.save_dir=$(abspath $(SUM_SAVE)/$(LED_SIZE)_16k) \
		checkpoint.finetune_from_model=$(abspath $(SUM_SAVE)/$(LED_SIZE)_16k/converted/model.pt) $(HYDRA_ARGS)
	$(VENV)/bin/longformer-fs summarize $(SUM_SAVE)/$(LED_SIZE)_16k/checkpoint_best.pt --data $(DATA) --split test \
		--encoder-json $(GPT2)/encoder.json --vocab-bpe $(GPT2)/vocab.bpe \
		--out $(SUM_SAVE)/$(LED_SIZE)_16k/test_summaries.jsonl $(SUMMARIZE_ARGS)

# Fine-tuning (paper §6): $(1) is a recipe in recipes/finetune/. longformer_fs.recipes fits
# its schedule to DATA's size and its model settings to MODEL, and reports the runs: the
# best dev metric (with SEEDS=n, n seeds into FT_SAVE/$(1)/seedK, and its mean and spread),
# or the task's own evaluation of each run's best checkpoint (eval-qa, ...).
MODEL ?=
FT_SAVE ?= checkpoints/finetune
SEEDS ?= 1
define finetune_run
finetune-$(1): $(STAMP)
	@test -n "$(MODEL)" || { echo "error: set MODEL=path/model.pt, a longformer_roberta checkpoint" \
		"(from longformer-fs import-hf, convert-roberta or an MLM run)"; exit 2; }
	@overrides=$$$$($(PY) -m longformer_fs.recipes finetune-overrides $(1) $(DATA) --nproc $(NPROC) --model $(MODEL)) \
		|| exit 2; \
	for seed in $$$$(seq 1 $(SEEDS)); do \
		save=$(abspath $(FT_SAVE)/$(1))$$$$(test $(SEEDS) -gt 1 && echo /seed$$$$seed); \
		echo ">> recipes/finetune/$(1).yaml, seed $$$$seed -> $$$$save ($$$$overrides)"; \
		$(HYDRA_TRAIN) --config-dir recipes/finetune --config-name $(1) task.data=$(abspath $(DATA)) \
			checkpoint.save_dir=$$$$save checkpoint.finetune_from_model=$(abspath $(MODEL)) common.seed=$$$$seed \
			$$$$overrides $(HYDRA_ARGS) || exit $$$$?; \
		best="$$$$best $$$$save/checkpoint_best.pt"; \
	done; \
	$(PY) -m longformer_fs.recipes report $(1) $(DATA) $$$$best
endef
$(foreach t,$(FINETUNE_TASKS),$(eval $(call finetune_run,$(t))))

# HotpotQA's two-stage variant (paper §6.1): stage 1 trains the evidence scorers
# (hotpotqa_evidence.yaml) on DATA; its --evidence-paragraphs best paragraphs of every train
# and valid question rebuild the data from the raw JSON (HOTPOT_TRAIN, HOTPOT_VALID, with
# GPT2's BPE) through prep hotpotqa --evidence; stage 2 (hotpotqa_answer.yaml) trains on
# that and eval-hotpotqa scores it. Everything goes to FT_SAVE/hotpotqa_{evidence,answer}.
HOTPOT_TRAIN ?=
HOTPOT_VALID ?=
HOTPOT_MAX_TOKENS ?= 4096
finetune-hotpotqa-two-stage: $(STAMP)
	@test -n "$(MODEL)" -a -f "$(HOTPOT_TRAIN)" -a -f "$(HOTPOT_VALID)" -a -f "$(GPT2)/encoder.json" || { echo \
		"error: set MODEL=path/model.pt, DATA=dir (prep hotpotqa), HOTPOT_TRAIN= and HOTPOT_VALID= (the JSON" \
		"DATA was prepared from) and GPT2=dir (encoder.json, vocab.bpe)"; exit 2; }
	@overrides=$$($(PY) -m longformer_fs.recipes finetune-overrides hotpotqa $(DATA) --nproc $(NPROC) \
		--model $(MODEL)) || exit 2; \
	evidence=$(abspath $(FT_SAVE)/hotpotqa_evidence); answer=$(abspath $(FT_SAVE)/hotpotqa_answer); \
	echo ">> stage 1: recipes/finetune/hotpotqa_evidence.yaml -> $$evidence ($$overrides)"; \
	$(HYDRA_TRAIN) --config-dir recipes/finetune --config-name hotpotqa_evidence task.data=$(abspath $(DATA)) \
		checkpoint.save_dir=$$evidence checkpoint.finetune_from_model=$(abspath $(MODEL)) \
		$$overrides $(HYDRA_ARGS) || exit $$?; \
	for split in train valid; do $(VENV)/bin/longformer-fs eval-hotpotqa $$evidence/checkpoint_best.pt \
		--data $(DATA) --split $$split --write-evidence $$evidence/$$split.evidence.json || exit $$?; done; \
	$(VENV)/bin/longformer-fs prep hotpotqa --train $(HOTPOT_TRAIN) --valid $(HOTPOT_VALID) \
		--evidence $$evidence/train.evidence.json $$evidence/valid.evidence.json --dict $(DATA)/dict.txt \
		--encoder-json $(GPT2)/encoder.json --vocab-bpe $(GPT2)/vocab.bpe --max-tokens $(HOTPOT_MAX_TOKENS) \
		--out $$answer/data || exit $$?; \
	echo ">> stage 2: recipes/finetune/hotpotqa_answer.yaml -> $$answer"; \
	$(HYDRA_TRAIN) --config-dir recipes/finetune --config-name hotpotqa_answer task.data=$$answer/data \
		checkpoint.save_dir=$$answer checkpoint.finetune_from_model=$(abspath $(MODEL)) \
		$$overrides $(HYDRA_ARGS) || exit $$?; \
	$(VENV)/bin/longformer-fs eval-hotpotqa $$answer/checkpoint_best.pt --data $$answer/data

# The project's lent GPU machine has no network and no fairseq: ../shared/gpu/prepare.sh puts
# the wheels it lacks into .gpu/ (carried with the working tree), and the report's GPU tests
# need pytest's (docs/gpus.md).
SHARED ?= ../shared
GPU_WHEELS := $(shell grep -iE '^(pytest|pluggy|iniconfig)==' constraints.txt)
gpu-bundle:
	bash $(SHARED)/gpu/prepare.sh
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 -d .gpu/whl $(GPU_WHEELS)

install: $(STAMP)

# The stamp records a finished install; it is rebuilt only when an input above changes,
# so a second `make install` returns in well under a second.
$(STAMP): $(INSTALL_INPUTS)
	@echo ">> creating $(VENV) $(if $(VENV_FLAGS),(keeping torch $(SYSTEM_TORCH) from $(PYTHON)),)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(PIP) install -q --upgrade "pip>=23" "setuptools>=64" wheel
	$(if $(TORCH_REQ),$(PIP) install -q $(TORCH_REQ),@echo ">> using torch $(SYSTEM_TORCH)")
	@# fairseq-fixed's metadata requires torchaudio, which would replace our torch, so it
	@# goes in with --no-deps after its real dependencies. It compiles Cython and C++
	@# against torch, hence --no-build-isolation (about 3 minutes on 2 cores, once).
	$(PIP) install -q -c constraints.txt -r requirements.txt -r requirements-test.txt -r requirements-onnx.txt
	$(PIP) install -q --no-deps --no-build-isolation $(FAIRSEQ_PIN)
	@# Editable install; this also compiles the cuda_ext kernels (about 30 s).
	$(PIP) install -q --no-deps --no-build-isolation -e .
	@touch $@
	@echo ">> installed; run 'make test' or '$(VENV)/bin/longformer-fs info'"

# Each test module runs on one worker (--dist loadscope), so its module fixtures are built once;
# in the order tests/conftest.py gives them, the longest first (xdist would sort them by size).
test: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=20 $(PYTEST_ARGS)

# A developer's loop: the suite without the tests marked slow (the journeys, the cold lane,
# the toy report, the miniature tables' trainings). make test, and CI, run them all.
test-fast: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=20 -m "not slow" $(PYTEST_ARGS)

# The whole suite, its modules' seconds written to tests/durations.json (commit it): make test's
# order, longest first. Rerun it when modules are added or change much.
test-durations: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --record-durations $(PYTEST_ARGS)

CXX_SOURCES := $(shell find cuda_ext -name '*.cpp' -o -name '*.cu' -o -name '*.h' | sort)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/clang-format --dry-run --Werror $(CXX_SOURCES)

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
	$(VENV)/bin/clang-format -i $(CXX_SOURCES)

demo: $(STAMP)
	$(VENV)/bin/longformer-fs demo --out demo_out $(DEMO_ARGS)

info: $(STAMP)
	$(VENV)/bin/longformer-fs info

clean-venv:
	rm -rf $(VENV)
