# The two set-up commands of README.md. Both create .venv if it is missing and install the
# package into it, editable (a change to the code needs no reinstall), with the versions the
# project is tested with (constraints.txt).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
WHEELS := $(VENV)/wheelhouse

.PHONY: demo test

$(PY):
	$(PYTHON) -m venv $(VENV)

# Every version of constraints.txt is first fetched as a wheel into $(WHEELS), then installed
# from there with no index: the wheel test (tests/test_packaging.py) resolves the package's
# dependencies for a fresh venv from the same files, offline. (Not pip's cache: the index's
# responses reach this machine without cache headers, so pip caches none of them.)
# pip's and setuptools' notes go to a log (shown when the install fails), not to the screen.
$(STAMP): pyproject.toml constraints.txt | $(PY)
	@echo "installing the package and the dependency versions of constraints.txt into $(VENV) (log: $(VENV)/install.log)"
	@{ $(PY) -m pip install --upgrade pip && $(PY) -m pip wheel --no-deps -r constraints.txt -w $(WHEELS) \
		&& $(PY) -m pip install --no-index --find-links $(WHEELS) -c constraints.txt -e ".[test]"; } > $(VENV)/install.log 2>&1 \
		|| { tail -n 30 $(VENV)/install.log; echo "error: installing into $(VENV) failed; the whole log is $(VENV)/install.log"; exit 1; }
	@touch $(STAMP)

demo: $(STAMP)
	bash examples/demo.sh

test: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest tests -q -n 2 --dist loadfile --durations=15
