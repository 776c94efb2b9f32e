# The two set-up commands of README.md. Both create .venv if it is missing and install the
# package (editable: the catalogs in problems/ and hparams/ are only importable as
# t2t_keras.problems / t2t_keras.hparams through the install).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip "setuptools>=77"
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	bash examples/demo.sh

test: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest tests -q
