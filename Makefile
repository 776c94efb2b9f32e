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

# pip's and setuptools' notes go to a log (shown when the install fails), not to the screen.
$(STAMP): pyproject.toml | $(PY)
	@echo "installing the package and its pinned dependencies into $(VENV) (log: $(VENV)/install.log)"
	@{ $(PY) -m pip install --upgrade pip "setuptools>=77" && $(PY) -m pip install -e ".[test]"; } > $(VENV)/install.log 2>&1 \
		|| { tail -n 30 $(VENV)/install.log; echo "error: installing into $(VENV) failed; the whole log is $(VENV)/install.log"; exit 1; }
	@touch $(STAMP)

demo: $(STAMP)
	bash examples/demo.sh

test: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -m pytest tests -q -n 2 --dist loadfile --durations=15
