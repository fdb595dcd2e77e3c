# Two commands for a fresh machine: `make test` (set up and pass the tests) and
# `make demo` (set up and run the main job on an embedded LocalCluster).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: venv test demo demo-pipeline bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,dashboard]"
	touch $@

venv: $(VENV)/.installed

test: venv
	$(PY) -m pytest -n auto --dist worksteal --durations=15

demo: venv
	$(PY) -m tgpflow.demo

demo-pipeline: venv
	$(PY) -m tgpflow.pipeline.demo

bench: venv
	$(PY) benchmarks/stats_pass.py
	$(PY) benchmarks/ncfd_pass.py
	$(PY) benchmarks/lam_selection.py
	$(PY) benchmarks/magic_table2.py
	$(PY) benchmarks/nkef_pass.py
	$(PY) benchmarks/blocked_solve.py
	$(PY) benchmarks/kef_cg.py
	$(PY) benchmarks/kernel_iterative.py
	$(PY) benchmarks/kernel_full_sample.py
	$(PY) benchmarks/nu_convention.py
	$(PY) benchmarks/mixture_density.py
	$(PY) benchmarks/kef_ring_grid.py
	$(PY) benchmarks/refit_speedup.py
	$(PY) benchmarks/precision_modes.py
	$(PY) benchmarks/rsr_iteration.py
	$(PY) benchmarks/svgd_gmrf.py
	$(PY) -m pip install -q pyod && $(PY) benchmarks/adbench.py

clean:
	rm -rf $(VENV) demo-model.zarr demo-pipeline
