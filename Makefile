# Two entry points (see README): `make demo` runs the main job, `make test` runs the tests.
# Both install what they need first; torch is pinned to the CPU wheel by constraints.txt.
PYTHON ?= python3
PIP := $(PYTHON) -m pip
STAMP := .setup.stamp

.PHONY: setup demo test

$(STAMP): pyproject.toml constraints.txt
	$(PIP) install -c constraints.txt -e ".[dev,models]"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PYTHON) -m shapeinfer.cli report examples/resnet.py
	$(PYTHON) -m shapeinfer.cli annotate examples/resnet.py --diff
	@# check exits 1 here on purpose: the file has a bug on a path its sample never takes
	-$(PYTHON) -m shapeinfer.cli check examples/bugs/truncating.py
	$(PYTHON) examples/train_mlp.py

# Test files run in parallel, each whole in one worker (a lowering test file shares one
# compiled graph among its cases); at most 4 workers, each holds its own JAX and torch.
test: $(STAMP)
	$(PYTHON) -m pytest tests -q -n auto --maxprocesses 4 --dist loadfile
