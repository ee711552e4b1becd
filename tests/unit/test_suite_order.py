"""`make test` runs the suite on two xdist workers, whole modules each, the longest modules first."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests.conftest import LONGEST_FIRST, pytest_collection_modifyitems

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_named_longest_first_exists():
    missing = [path for path in LONGEST_FIRST if not (ROOT / path).is_file()]
    assert not missing, f"tests/conftest.py LONGEST_FIRST names modules that are gone: {missing}"


def test_the_longest_modules_come_first_and_the_rest_keep_their_order():
    def item(nodeid: str):
        return SimpleNamespace(nodeid=nodeid, fixturenames=[], get_closest_marker=lambda name: None)

    names = [
        "tests/unit/test_a.py::test_1",
        f"{LONGEST_FIRST[1]}::test_x",
        "tests/unit/test_b.py::test_2",
        f"{LONGEST_FIRST[0]}::test_y",
        "tests/unit/test_a.py::test_3",
        f"{LONGEST_FIRST[1]}::test_z",
    ]
    items = [item(name) for name in names]
    pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == [names[3], names[1], names[5], names[0], names[2], names[4]]


def test_make_test_keeps_the_collection_order_on_two_workers():
    recipe = (ROOT / "Makefile").read_text()
    command = next(line.strip() for line in recipe.splitlines() if "-m pytest" in line)
    # loadfile: a module's fixtures are set up once; no reorder: xdist would put the modules with most tests first
    for flag in ("-n 2", "--dist loadfile", "--no-loadscope-reorder"):
        assert flag in command, command
