# The two commands of the README. Each installs what it needs first (bin/setup).
.PHONY: setup run test check

setup:
	bash bin/setup

# The main job on its shipped default config.
run: setup
	python3 -m gym train configs/cp_grpo_tiny.yaml

# The lint gate (ruff, configured in pyproject.toml), then the whole test suite (unit + real-Docker integration)
# on two workers, each taking whole modules, the longest first (tests/conftest.py, pytest_collection_modifyitems).
test: setup
	python3 -m ruff check .
	python3 -m ruff format --check .
	python3 -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25 tests

# The edit loop: the lint gate and the unit tier (no Docker), on two workers; the default tokenizer is built
# first when a fresh clone lacks it (the CLI tests read it, and must not see its one-time training in their output).
check:
	python3 -m ruff check .
	python3 -m ruff format --check .
	python3 -c "from gym.format.bpe import load_bpe; load_bpe()"
	python3 -m pytest -q -n 2 -m "not slow and not docker" tests/unit
