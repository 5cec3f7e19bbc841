# The course's commands. Every target creates .venv and installs on first use.
#   make demo    grade the bundled sample submissions and print the grades (the main job)
#   make test    the whole test suite (what CI runs)
#   make test-fast  the fast tier: every layer, one real run per exercise, the linter (under 2 minutes)
#   make lab     JupyterLab on the course
#   make bench   benchmarks (engine vs fresh torchrun; a warm 4-rank check; make grade vs plain nbgrader autograde; a hung task; a spinner)
#   make grade   autograde every collected submission of ASSIGNMENT, in parallel, into the gradebook
#                (each in a bubblewrap sandbox; SANDBOX=0 for none)
#   make report  the class report of ASSIGNMENT (markdown and a PNG plot)
#   make test-exercise ASSIGNMENT=05_x  the tests a new or changed exercise must pass
#   make exercises  stamp the check cells' points from the checks, regenerate exercises/ (the release) from solutions/
#   make selfcheck  grade the solutions and known-wrong submissions on this machine's hardware
#   make gpucheck  the GPU path on this machine (driver, fork safety, nccl, sandboxes, GPU-only checks), a verdict a line
#   make student  build/student: the grader for students' servers, without hidden checks or answers
#   make hub     JupyterHub for the class on 127.0.0.1:8000 (root; deploy/hub/jupyterhub_config.py)
#   make collect  collect ASSIGNMENT from the exchange, refusing forged, postdated or backdated submissions

PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
ASSIGNMENTS = $(shell $(BIN)/python -m grader list --ids 2>/dev/null)  # found by discovery: grader/exercises/<name>/
ASSIGNMENT ?= 02_ddp_basics
COURSE ?= $(CURDIR)
# JOBS empty: one job per core, and with GPUs no more than the groups of GPUs (each job has its own)
JOBS ?=

.PHONY: install demo test test-fast test-exercise lab bench grade report exercises translations selfcheck gpucheck clean hub student collect

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# What only the tests need (pytest, nbval, playwright, ...): pyproject's `test` extra.
$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

demo: install
	$(BIN)/python -m grader demo

# One pytest worker per core (TEST_WORKERS=0: one process); tests/conftest.py keeps each file on one worker.
TEST_WORKERS ?= 2
test: install $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=30 tests lessons --nbval-lax

# The fast tier (tests/conftest.py marks it): every layer, one real 2-rank grading per exercise, and the linter; under
# 2 minutes on a 2-core machine. make test runs everything, the fast tier included.
test-fast: install $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m fast tests

# Student and instructor on one laptop: each exercise is (re)released to the local exchange
# (.nbgrader/exchange, or $NBGRADER_EXCHANGE) when it changed, so that Nbgrader > Assignment List
# fetches it (into ddp-course/<id>/) and submits it; Validate sits in each notebook's toolbar;
# Nbgrader > Formgrader is the instructor's side (collect, autograde, feedback). The lab opens on
# welcome/ (its COURSE_LANG version); the file browser does not list solutions/ nor the grader's hidden tests
# (deploy/lab/jupyter_server_config.py).
# COURSE_LANG=es (nl, ja): an exercise translated into that language is released from translated/<lang>/ instead.
EXCHANGE = $(or $(NBGRADER_EXCHANGE),$(CURDIR)/.nbgrader/exchange)
# The page the lab opens on: where the lessons are, how to fetch, check, hint, see progress and submit.
WELCOME = welcome/$(if $(filter es nl ja,$(COURSE_LANG)),$(COURSE_LANG)/)welcome.ipynb
lab: install
	@for a in $(ASSIGNMENTS); do \
	  test -d exercises/$$a || continue; \
	  from=exercises; test -n "$(COURSE_LANG)" && test -f translated/$(COURSE_LANG)/$$a/$$a.ipynb && from=translated/$(COURSE_LANG); \
	  cmp -s $$from/$$a/$$a.ipynb $(EXCHANGE)/ddp-course/outbound/$$a/$$a.ipynb || \
	    $(BIN)/nbgrader release_assignment $$a --force --log-level=ERROR --CourseDirectory.release_directory=$$from || exit 1; \
	done
	@mkdir -p ddp-course  # where the Assignment List fetches to: the browser opens there
	@$(BIN)/python -m grader.gradebook.course_access $(CURDIR)  # one line if other accounts can read the answers
	NBGRADER_CACHE=$(or $(NBGRADER_CACHE),$(CURDIR)/.nbgrader/cache) \
	  $(BIN)/jupyter lab --ServerApp.root_dir=$(CURDIR) --config=deploy/lab/jupyter_server_config.py \
	  --LabApp.default_url=/lab/tree/$(WELCOME) $(if $(filter 0,$(shell id -u)),--allow-root)

bench: install
	$(BIN)/python benchmarks/bench_engine.py
	$(BIN)/python benchmarks/bench_four_ranks.py
	$(BIN)/python benchmarks/bench_grading.py
	$(BIN)/python benchmarks/bench_notebook.py
	$(BIN)/python benchmarks/bench_hang.py
	$(BIN)/python benchmarks/bench_spinner.py

# Each submission in bubblewrap sandboxes (apt-get install bubblewrap); SANDBOX=0 grades unsandboxed (a trusted class
# only: the grade table and the report say so).
SANDBOX ?= 1
grade: install
	$(BIN)/python -m grader grade $(ASSIGNMENT) --root $(COURSE) $(if $(JOBS),--jobs $(JOBS)) $(if $(filter 0,$(SANDBOX)),--no-sandbox)

report: install
	$(BIN)/python -m grader report $(ASSIGNMENT) --root $(COURSE)

# First the check cells' points are stamped from the checks (python -m grader points: points live in the
# checks only), then nbgrader writes each release from its solution notebook. No exercise found: the
# listing's error is shown.
# A release is regenerated only when its solution folder, the release itself or nbgrader's settings changed
# since it was last generated here (stamps in .nbgrader/generated/; a fresh clone regenerates each once).
# Then the translation catalogs follow the releases (python -m grader translate: a new exercise gets its own).
GENERATED = .nbgrader/generated
release_sum = find solutions/$(1) exercises/$(1) nbgrader_config.py grader/course/points_preprocessor.py -type f \
	-not -path '*/.ipynb_checkpoints/*' 2>/dev/null | LC_ALL=C sort | xargs cat | sha256sum
exercises: install
	@test -n "$(strip $(ASSIGNMENTS))" || $(BIN)/python -m grader list --ids || exit 1
	$(BIN)/python -m grader points $(ASSIGNMENTS)
	@mkdir -p $(GENERATED); for a in $(ASSIGNMENTS); do \
	  if test -d exercises/$$a && test "$$($(call release_sum,$$a))" = "$$(cat $(GENERATED)/$$a 2>/dev/null)"; then \
	    echo "$$a: release up to date"; continue; fi; \
	  echo "$$a: generating exercises/$$a"; \
	  $(BIN)/nbgrader generate_assignment $$a --force --log-level=WARN || exit 1; \
	  $(call release_sum,$$a) > $(GENERATED)/$$a; \
	done
	$(BIN)/python -m grader translate
	test ! -f samples/make_samples.py || $(BIN)/python samples/make_samples.py  # make demo's class, from the 02 release

# The tests a changed or new exercise must pass (CONTRIBUTING.md), without the rest of the suite.
test-exercise: install $(VENV)/.installed-test
	@test -n "$(filter $(ASSIGNMENT),$(ASSIGNMENTS))" || { echo "no exercise $(ASSIGNMENT): one of $(ASSIGNMENTS)"; exit 2; }
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -q tests/exercises/test_$(ASSIGNMENT)*.py tests/test_points.py
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -q -m fast tests  # all an exercise can break there
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -q tests/exercises/test_lazy_answers.py \
	  tests/test_translate.py tests/test_selfcheck_mistakes.py -k $(ASSIGNMENT)
	$(BIN)/python -m grader selfcheck --exercise $(ASSIGNMENT) --no-make-grade  # solution full, release 0, mistakes

# The translation catalogs (locale/<lang>/LC_MESSAGES/*.po) follow the English lessons; lessons/<lang>/ is built.
translations: install
	$(BIN)/python -m grader translate

selfcheck: install
	$(BIN)/python -m grader selfcheck

# The GPU path on this machine, a verdict a line (docs/hardware.md); green on CPU, where its GPU steps say "no GPU".
gpucheck: install
	$(BIN)/python -m grader gpucheck

# An installable folder for students' images (pip install build/student): docs/hub.md, "Student servers hold no answers".
student: install
	$(BIN)/python -m grader student-build build/student

clean:
	rm -rf $(VENV) gradebook.db .nbgrader .pytest_cache build

# JupyterHub for the class (docs/hub.md); settings: HUB_* in the environment.
# Students' servers run HUB_STUDENT_ENV (make student in a venv of its own, no hidden checks); the course
# directory and the instructor's venv must be the instructor's, mode 0700 (the hub checks).
HUB_STUDENT_ENV ?= /srv/ddp-course/student-env
hub: install
	$(BIN)/python -m pip install --quiet -e '.[hub]'
	test -x deploy/hub/node_modules/.bin/configurable-http-proxy || npm ci --prefix deploy/hub --no-audit --no-fund
	mkdir -p $(or $(HUB_STATE),build/hub)
	$(BIN)/python deploy/hub/student_env.py $(HUB_STUDENT_ENV)
	HUB_PYTHON=$(HUB_STUDENT_ENV)/venv/bin/python $(BIN)/jupyterhub -f deploy/hub/jupyterhub_config.py

# Collect ASSIGNMENT from the exchange, refusing submissions in another's name, postdated or backdated.
collect: install
	$(BIN)/python -m grader collect $(ASSIGNMENT) --root $(COURSE) --update
