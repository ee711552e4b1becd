"""gym/registry.py and `python -m gym envs`: environments by name, shipped and from installed entry points.

Installed distributions are faked here as ``NAME-VERSION.dist-info`` folders (METADATA and
entry_points.txt, what pip writes) on a folder put on ``sys.path``, which is all
`importlib.metadata.entry_points` reads; tests/integration/test_env_package.py installs a real
package with pip.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gym import registry
from gym.environment_config import EnvironmentConfig
from gym.overrides import parse_override
from gym.registry import GROUP, RegistryError, environment_config
from tests.cli_support import ROOT, gym, one_line
from tests.config_support import TRAIN_TOML

ENVIRONMENT_YAML = """\
name: fake_env
task_pool: {type: jsonl, path: tasks.jsonl, format: taco, id_prefix: "fake/"}
episode: {max_turns: 5}
"""
ROW = (
    '{"task_id": "echo", "question": "Print the line.", "solutions": "[\\"print(input())\\"]", '
    '"input_output": "{\\"inputs\\": [\\"a\\\\n\\"], \\"outputs\\": [\\"a\\\\n\\"]}"}\n'
)


class Site:
    """A folder on sys.path holding fake installed distributions and their modules."""

    def __init__(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.path = path
        path.mkdir()
        monkeypatch.syspath_prepend(str(path))

    def install(self, distribution: str, entries: dict[str, str], modules: dict[str, str] | None = None) -> None:
        """Write ``distribution``'s metadata with ``entries`` (NAME -> module:attribute) and its module files."""
        info = self.path / f"{distribution.replace('-', '_')}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n")
        lines = "".join(f"{name} = {value}\n" for name, value in entries.items())
        (info / "entry_points.txt").write_text(f"[{GROUP}]\n{lines}")
        for name, source in (modules or {}).items():
            (self.path / name).parent.mkdir(parents=True, exist_ok=True)
            (self.path / name).write_text(source)

    def packaged(self, distribution: str, module: str, name: str = "fake_env") -> None:
        """A distribution whose package ``module`` ships environment.yaml and tasks.jsonl, registered as ``name``."""
        body = (
            '"""A fake environment for the registry tests."""\n'
            "from gym.registry import packaged\n\n"
            "def environment():\n"
            '    """One echo task, shipped in the package."""\n'
            "    return packaged(__name__)\n"
        )
        self.install(
            distribution,
            {name: f"{module}:environment"},
            {
                f"{module}/__init__.py": body,
                f"{module}/environment.yaml": ENVIRONMENT_YAML,
                f"{module}/tasks.jsonl": ROW,
            },
        )


@pytest.fixture
def site(tmp_path, monkeypatch) -> Site:
    return Site(tmp_path / "site", monkeypatch)


def cli_env(site: Site) -> dict[str, str]:
    """The environment of a `python -m gym` subprocess that sees the fake distributions."""
    return {"PYTHONPATH": os.pathsep.join([str(ROOT), str(site.path)])}


def test_a_spec_is_a_file_when_it_looks_like_one_or_exists(tmp_path, monkeypatch):
    assert registry.is_name("cp_smoke") and registry.is_name("my-env.v2")
    for path_like in ("configs/cp_smoke.yaml", "env.yaml", "env.TOML", "./env", "/abs/env", "", "-x"):
        assert not registry.is_name(path_like), path_like
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain").write_text("name: x\n")
    assert registry.names_file("plain") and not registry.names_file("cp_smoke")  # your own file wins


def test_the_shipped_environments_are_the_configs_with_a_task_pool():
    shipped = {entry.name: entry for entry in registry.shipped()}
    assert {"cp_smoke", "cp_heldout_eval", "swe_smoke"} <= set(shipped)
    assert not {"cp_grpo_tiny", "policy_tiny", "killtest_weak_pids"} & set(shipped)  # train, serve, sandbox files
    smoke = shipped["cp_smoke"]
    assert smoke.distribution == "code-rl-gym" and smoke.source == "configs/cp_smoke.yaml" and smoke.shipped
    assert registry.describe(smoke).startswith("Smoke environment over the shipped competitive-programming samples")


def test_a_shipped_name_is_its_file_overrides_included():
    by_file = EnvironmentConfig.from_file(ROOT / "configs/cp_smoke.yaml")
    assert environment_config("cp_smoke") == by_file
    changed = environment_config("cp_smoke", overrides=[parse_override("episode.max_turns=3")])
    assert changed.episode.max_turns == 3 and by_file.episode.max_turns == 8


def test_an_installed_entry_point_gives_its_packaged_environment(site, tmp_path, monkeypatch):
    site.packaged("fake-env-dist", "fake_env_pkg_a")
    monkeypatch.chdir(tmp_path)  # the package's task file is found from any working directory
    config = environment_config("fake_env")
    assert config.name == "fake_env" and config.task_pool.path == site.path / "fake_env_pkg_a" / "tasks.jsonl"
    assert environment_config("fake_env", overrides=[parse_override("episode.max_turns=2")]).episode.max_turns == 2
    (entry,) = [e for e in registry.registered() if e.name == "fake_env"]
    assert (entry.distribution, entry.version, entry.source) == ("fake-env-dist", "0.1", "fake_env_pkg_a:environment")
    assert registry.describe(entry) == "One echo task, shipped in the package."


def test_packaged_rebases_relative_paths_of_every_pool_and_keeps_absolute_ones(site):
    mixture = (
        "name: mix\ntask_pool:\n  type: mixture\n  sources:\n"
        "    - {weight: 1, pool: {type: jsonl, path: a.jsonl, solutions: sol/a.jsonl}}\n"
        "    - {weight: 1, pool: {type: jsonl, path: /data/b.jsonl}}\n"
        "    - {weight: 1, pool: {type: generated, count: 2}}\n"
    )
    site.install("mix-dist", {}, {"mix_pkg/__init__.py": "", "mix_pkg/env.yaml": mixture})
    config = registry.packaged("mix_pkg", "env.yaml")
    first, second, third = (source.pool for source in config.task_pool.sources)
    assert first.path == site.path / "mix_pkg/a.jsonl" and first.solutions == site.path / "mix_pkg/sol/a.jsonl"
    assert second.path == Path("/data/b.jsonl") and third.type == "generated"


def test_an_unknown_name_is_one_line_exit_2_naming_what_is_registered(tmp_path):
    with pytest.raises(RegistryError, match=r"named 'no_such_env' \(registered: .*cp_smoke.*\) — .*envs list"):
        environment_config("no_such_env")
    done = gym("rollout", "no_such_env", "--episodes", "1", "--out", str(tmp_path / "out"))
    one_line(done, 2, "'no_such_env'", "envs list")
    assert not (tmp_path / "out").exists()  # refused before --out is made


@pytest.mark.parametrize(
    ("value", "modules", "said"),
    [
        ("missing_module_xyz:environment", {}, "cannot be imported: ModuleNotFoundError: No module named"),
        ("bad_pkg_b:nothing", {"bad_pkg_b.py": "x = 1\n"}, "cannot be imported: AttributeError"),
        ("bad_pkg_c:environment", {"bad_pkg_c.py": "import nowhere_xyz\n"}, "cannot be imported: ModuleNotFoundError"),
        ("bad_pkg_d:environment", {"bad_pkg_d.py": "environment = 3\n"}, "names a int, not a callable"),
        (
            "bad_pkg_e:environment",
            {"bad_pkg_e.py": "def environment():\n    return {'name': 'x'}\n"},
            "returned a dict",
        ),
        ("bad_pkg_f:environment", {"bad_pkg_f.py": "def environment():\n    1 / 0\n"}, "failed: ZeroDivisionError"),
        (
            "bad_pkg_g:environment",
            {
                "bad_pkg_g.py": "from gym.environment import EnvironmentConfig\ndef environment():\n"
                "    return EnvironmentConfig.from_dict({'name': 'x', 'task_pool': {'type': 'jsonl', 'pth': 'a'}})\n"
            },
            "failed: EnvironmentConfigError: environment: task_pool.path: Field required; environment: task_pool.pth: Extra",
        ),
    ],
)
def test_a_broken_entry_point_is_refused_naming_it_and_its_distribution(site, value, modules, said):
    site.install("broken-dist", {"broken_env": value}, modules)
    with pytest.raises(RegistryError) as raised:
        environment_config("broken_env")
    message = str(raised.value)
    assert message.startswith(f"environment 'broken_env' (broken-dist 0.1, {value}): ") and said in message, message
    assert message.endswith("— fix or reinstall broken-dist, or uninstall it (pip uninstall broken-dist)")
    assert "\n" not in message


def test_a_name_two_packages_register_is_refused(site):
    site.packaged("twin-one", "twin_pkg_one", name="twin_env")
    site.packaged("twin-two", "twin_pkg_two", name="twin_env")
    with pytest.raises(
        RegistryError, match=r"'twin_env' is registered by more than one entry point \(twin-one, twin-two\)"
    ):
        environment_config("twin_env")


def test_a_package_may_not_take_a_shipped_name_and_neither_is_loaded_by_it(site):
    site.packaged("squatter", "squat_pkg", name="cp_smoke")
    with pytest.raises(RegistryError, match=r"squatter registers the name of the shipped configs/cp_smoke.yaml — "):
        environment_config("cp_smoke")
    assert environment_config("configs/cp_smoke.yaml").name == "cp_smoke"  # the path still works


def test_envs_list_shows_shipped_and_installed_rows(site):
    site.packaged("fake-env-dist", "fake_env_pkg_h")
    done = gym("envs", "list", env=cli_env(site))
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["NAME", "DISTRIBUTION", "SOURCE", "DESCRIPTION"]
    (fake,) = [row for row in rows if row.startswith("fake_env ")]
    assert fake.split()[:4] == ["fake_env", "fake-env-dist", "0.1", "fake_env_pkg_h:environment"]
    assert fake.endswith("One echo task, shipped in the package.")
    assert any(row.split()[:3] == ["cp_smoke", "code-rl-gym", "0.1.0"] for row in rows)
    listed = json.loads(gym("envs", "list", "--json", env=cli_env(site)).stdout)
    (row,) = [row for row in listed if row["name"] == "fake_env"]
    assert row == {
        "name": "fake_env",
        "distribution": "fake-env-dist",
        "version": "0.1",
        "shipped": False,
        "source": "fake_env_pkg_h:environment",
        "description": "One echo task, shipped in the package.",
        "problem": None,
    }


def test_envs_list_marks_a_broken_entry_point_and_exits_2(site):
    site.packaged("fake-env-dist", "fake_env_pkg_i")
    site.install("broken-dist", {"broken_env": "missing_module_xyz:environment"})
    done = gym("envs", "list", env=cli_env(site))
    line = one_line(done, 2, "'broken_env'", "broken-dist", "ModuleNotFoundError")
    assert "fake_env_pkg_i:environment" in done.stdout  # every other row is still listed
    (broken,) = [row for row in done.stdout.splitlines() if row.startswith("broken_env ")]
    assert "ERROR: environment 'broken_env'" in broken and line.endswith("(pip uninstall broken-dist)")


def test_envs_show_prints_the_resolved_configuration(site):
    site.packaged("fake-env-dist", "fake_env_pkg_j")
    done = gym("envs", "show", "fake_env", env=cli_env(site))
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["name"] == "fake_env" and shown["task_pool"]["path"] == str(site.path / "fake_env_pkg_j/tasks.jsonl")
    one_line(gym("envs", "show", "nope_env"), 2, "'nope_env'")


def test_a_train_config_names_its_environments_by_name(site, tmp_path):
    from trainer.config import TrainConfig

    site.packaged("fake-env-dist", "fake_env_pkg_k")
    path = tmp_path / "train.toml"
    path.write_text(TRAIN_TOML.replace('"configs/cp_smoke.yaml"', '"fake_env"'))
    assert TrainConfig.load(path).env.name == "fake_env"
    changed = TrainConfig.load(path, overrides=[parse_override("environment.episode.max_turns=3")])
    assert changed.env.episode.max_turns == 3 and changed.env.task_pool.path.is_absolute()
    path.write_text(TRAIN_TOML.replace('"configs/cp_smoke.yaml"', '"nope_env"'))
    with pytest.raises(RegistryError, match=rf"^{path}: environment: no environment file or registered"):
        TrainConfig.load(path)


def test_an_entry_point_name_that_reads_as_a_path_is_listed_as_unusable(site):
    site.install("odd-dist", {"odd/name": "odd_pkg:environment", "odd.yaml": "odd_pkg:environment"})
    everything = registry.registered()
    odd = [entry for entry in everything if entry.distribution == "odd-dist"]
    assert sorted(entry.name for entry in odd) == ["odd.yaml", "odd/name"]
    for entry in odd:
        why = registry.problem(entry, everything)
        assert why.startswith(f"environment {entry.name!r} (odd-dist 0.1, odd_pkg:environment): the name is not usable")
        assert why.endswith("— rename the entry point in odd-dist's [project.entry-points] table")
