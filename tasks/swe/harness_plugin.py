"""The grading harness's pytest plugin: every test outcome, recorded out of band, each line authenticated.

The host (`tasks.swe.harness`) writes this file, a per-run key and a settings file into a folder of the grading
container outside the repository, right before the test run (after the candidate's diff is applied, when no code
of the candidate has run in that container), and starts pytest with ``-p _gym_harness`` on ``PYTHONPATH``. pytest
imports ``-p`` plugins while it parses its arguments, before any conftest, test module or repository code, so at
import this module reads the key and deletes its file, then opens the record file; code that runs later in the
pytest process, or in any other process, finds no key on disk, in the environment or in argv. Each record line is
``JSON MAC``: ``[seq, kind, ...]`` and an HMAC-SHA256 of the JSON under the key; seq counts from 0, so a line
dropped, repeated, reordered or forged is seen by the host (a line written by code without the key does not
verify).

Recorded: ``start``; ``collect`` (a failed collection report); ``report`` (node id as the terminal prints it,
phase, outcome, whether it is an xfail); ``hook`` (a hook implementation whose code lives neither in the
interpreter's own directories nor in a repository file the harness trusts: one identical to the pristine tree or
a test file as it was when the run started); ``patched`` (a function or class member of pytest, pluggy or
builtins, or one of their modules in ``sys.modules``, that is no longer what it was at start, or a collected test
module whose class is no longer a plain module's, where what replaced it is not trusted code either; a collected test
whose function, code, defaults or closure is no longer what it was collected with, or whose module's namespace
gained or rebound a name to untrusted code or to an object of an untrusted class, checked right before each test is
called and at the end); ``changed`` (a watched file, i.e. a test file or a conftest/ini file beside or above one, whose
content changed after start: checked when collection ends and when the session ends); ``finish`` (pytest's
exit status and counters at the end of the session) and ``end`` (the exit status once every plugin has
unconfigured; the process must exit with it).

Only the first configuration in the process is recorded: an in-process run of pytest inside a test (pytester)
is not. A process that imports this module under its harness name without finding the key (a pytest started by a
test, an xdist worker) records nothing. Imported under any other name (the host's own imports of it) it does
nothing at all. Stdlib and pytest only: it runs under the instance's interpreter.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import json
import os
import sys
import types

import pytest

NAME = "_gym_harness"
MAX_ID = 2048  # longer node ids are cut: the host compares the same cut
_INTERNAL = ("pytest", "_pytest", "pluggy", "builtins")


def _digest(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def _code_files(obj: object) -> list[str]:
    """The files the code of ``obj`` (a function, method, partial, class member or callable object) comes from;
    ``"<no code>"`` where none can be found."""
    found: list[str] = []
    seen = 0
    while obj is not None and seen < 8:
        seen += 1
        target = getattr(obj, "__func__", obj)  # bound and class methods
        if isinstance(target, staticmethod | classmethod):
            target = target.__func__
        if isinstance(target, property):
            found += [f for part in (target.fget, target.fset, target.fdel) if part for f in _code_files(part)]
            return found or ["<no code>"]
        code = getattr(target, "__code__", None)
        if isinstance(code, types.CodeType):
            found.append(code.co_filename)
        elif isinstance(target, type):
            found.append(getattr(sys.modules.get(target.__module__), "__file__", None) or "<no code>")
        elif hasattr(target, "func"):  # functools.partial
            obj = target.func
            continue
        elif callable(target) and not isinstance(target, types.BuiltinFunctionType):
            code = getattr(type(target).__call__, "__code__", None)
            found.append(code.co_filename if isinstance(code, types.CodeType) else "<no code>")
        elif not isinstance(target, types.BuiltinFunctionType):
            found.append("<no code>")
        obj = getattr(target, "__wrapped__", None)
    return found or ["<no code>"]


def _members(module: types.ModuleType) -> dict[str, object]:
    """Functions and classes defined in ``module``, and the members of those classes, by qualified name."""
    out: dict[str, object] = {}
    name = module.__name__
    for attr, value in list(vars(module).items()):
        kinds = types.FunctionType | types.BuiltinFunctionType | type
        if isinstance(value, kinds) and getattr(value, "__module__", None) == name:
            out[f"{name}.{attr}"] = value
            if isinstance(value, type):
                for member, inner in list(vars(value).items()):
                    if isinstance(inner, types.FunctionType | staticmethod | classmethod | property):
                        out[f"{name}.{attr}.{member}"] = inner
    return out


_PLAIN = (int, float, complex, str, bytes, bool, type(None), tuple, list, dict, set, frozenset)


def _callee(item) -> object | None:
    """The function a collected test calls (a method's function), or None for items that are no Python function."""
    obj = getattr(item, "obj", None) if isinstance(item, pytest.Function) else None
    return getattr(obj, "__func__", obj)


def _shape(function: object) -> tuple:
    """What a test function runs: the function, its code, defaults, keyword defaults and closure (the objects,
    compared by identity and kept alive, so no new object can take a freed one's id)."""
    attributes = ("__code__", "__defaults__", "__kwdefaults__", "__closure__")
    return (function, *(getattr(function, name, None) for name in attributes))


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


_MISSING = object()
_BUILTIN_NAMES = frozenset(vars(builtins))


def _origin(value: object) -> list[str]:
    """The files ``value`` comes from (its code, or its class's module); none for data, modules and builtins."""
    if type(value) in _PLAIN or isinstance(value, types.ModuleType | types.BuiltinFunctionType):
        return []
    if isinstance(value, type) and getattr(builtins, value.__name__, None) is value:  # builtins: check_internals
        return []
    if callable(value):
        return _code_files(value)
    return [getattr(sys.modules.get(type(value).__module__), "__file__", None) or "<no code>"]


def _internal(name: str) -> bool:
    return any(name == root or name.startswith(root + ".") for root in _INTERNAL)


def _test_modules(session) -> list[types.ModuleType]:
    """The modules of the collected tests (already imported by collection)."""
    found: dict[int, object] = {}
    for item in getattr(session, "items", None) or ():
        parent = item.getparent(pytest.Module)
        if parent is not None:
            found.setdefault(id(parent), parent.obj)
    return list(found.values())


class _Harness:
    def __init__(self, folder: str) -> None:
        key_path = os.path.join(folder, "key")
        with open(key_path, "rb") as handle:
            key = handle.read()
        os.unlink(key_path)
        with open(os.path.join(folder, "settings.json"), encoding="utf-8") as handle:
            settings = json.load(handle)
        self.folder = os.path.realpath(folder)
        self.repo = os.path.realpath(settings["repo"])
        self.pristine = os.path.realpath(settings["pristine"])
        self.mac = hmac.new(key, digestmod=hashlib.sha256)
        del key
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        self.fd: int | None = os.open(os.path.join(folder, "record"), flags, 0o600)
        self.seq = 0
        self.config = None
        self.session = None
        self.trusted_roots = tuple(
            os.path.realpath(p) + os.sep for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, self.folder}
        )
        self.config_names = tuple(settings.get("config_names", ()))  # conftest.py and the ini files pytest reads
        self.watched = self._watch_list(settings.get("watch", ()))
        self.baseline = {path: _digest(path) for path in self.watched}
        self.tests = {os.path.realpath(os.path.join(self.repo, rel)) for rel in settings.get("watch", ())}
        self.modules = {name: module for name, module in sys.modules.items() if _internal(name)}
        self.members: dict[str, object] = {}
        for module in self.modules.values():
            if isinstance(module, types.ModuleType):
                self.members.update(_members(module))
        self.verdicts: dict[str, bool] = {}  # file -> trusted (cached)
        self.callees: dict[str, tuple[object, tuple]] = {}  # node id -> (test function, its shape when collected)
        self.namespaces: dict[int, tuple[types.ModuleType, dict[str, object]]] = {}  # test module -> its names
        self.flagged: set[str] = set()
        self.write("start", os.getpid(), pytest.__version__)

    def _watch_list(self, relative: list[str]) -> list[str]:
        """The test files, and every conftest/ini file pytest would read beside or above one (present or not)."""
        paths: set[str] = set()
        for rel in relative:
            path = os.path.realpath(os.path.join(self.repo, rel))
            paths.add(path)
            folder = os.path.dirname(path)
            while folder.startswith(self.repo):
                paths.update(os.path.join(folder, name) for name in self.config_names)
                if folder == self.repo:
                    break
                folder = os.path.dirname(folder)
        return sorted(paths)

    def write(self, kind: str, *data: object) -> None:
        if self.fd is None:
            return
        body = json.dumps([self.seq, kind, *data], separators=(",", ":"), ensure_ascii=True)
        mac = self.mac.copy()
        mac.update(body.encode())
        line = f"{body} {mac.hexdigest()}\n".encode()
        while line:
            line = line[os.write(self.fd, line) :]
        self.seq += 1

    def trusted(self, filename: str) -> bool:
        """Code of the interpreter's own directories, of this harness, or of a repository file the candidate did
        not write: identical to the pristine tree, or a test file as it was at start."""
        if filename in self.verdicts:
            return self.verdicts[filename]
        path = os.path.realpath(filename) if filename.startswith(os.sep) else filename
        verdict = False
        if path.startswith(self.trusted_roots):
            verdict = True
        elif path.startswith(self.repo + os.sep):
            now = _digest(path)
            if path in self.tests:
                verdict = now is not None and now == self.baseline.get(path)
            else:
                pristine = os.path.join(self.pristine, os.path.relpath(path, self.repo))
                verdict = now is not None and now == _digest(pristine)
        self.verdicts[filename] = verdict
        return verdict

    def check_files(self, when: str) -> None:
        for path in self.watched:
            if _digest(path) != self.baseline[path]:
                self.write("changed", when, os.path.relpath(path, self.repo))

    def check_hooks(self) -> None:
        manager = self.config.pluginmanager
        for hook_name, caller in sorted(vars(manager.hook).items()):
            if not hasattr(caller, "get_hookimpls"):
                continue
            for impl in caller.get_hookimpls():
                for filename in _code_files(impl.function):
                    if not self.trusted(filename):
                        self.write("hook", hook_name, filename, str(impl.plugin_name)[:200])

    def check_modules(self) -> None:
        """A test module whose class is no longer a plain module's (a class whose code is not trusted wraps what
        its tests call)."""
        for module in _test_modules(self.session):
            kind = type(module)
            if kind is not types.ModuleType:
                members = [
                    m for m in vars(kind).values() if isinstance(m, types.FunctionType | staticmethod | property)
                ]
                where = [f for member in members for f in _code_files(member) if not self.trusted(f)]
                if where or not isinstance(module, types.ModuleType):
                    self.write("patched", f"{getattr(module, '__name__', '?')}.__class__", (where or ["<no code>"])[0])

    def collected(self, item) -> None:
        """Remember what a collected test calls and its module's namespace, to see them changed later."""
        function = _callee(item)
        if function is None:
            return
        self.callees[item.nodeid] = (function, _shape(function))
        module = getattr(item, "module", None)
        if isinstance(module, types.ModuleType) and id(module) not in self.namespaces:
            self.namespaces[id(module)] = (module, dict(vars(module)))
        code = getattr(function, "__code__", None)
        if not isinstance(code, types.CodeType) or os.path.realpath(code.co_filename) in self.tests:
            return  # a test file's own code: its content is watched (``changed``)
        if not self.trusted(code.co_filename):  # once a module and file: a wrapper around every test is one line
            self.patch(f"{getattr(module, '__name__', '?')} tests run code of", code.co_filename)

    def check_tests(self, only=None) -> None:
        """Each collected test (``only``: that one) still calls the function it was collected with, unchanged, and
        its module's namespace holds nothing new of untrusted code (a test file's own rebinding of a global to data
        or to its own code is trusted)."""
        if only is not None:  # pytest resolves the item's function next: the one collected, unchanged
            checked = [(only, *self.callees[only.nodeid], _callee(only))] if only.nodeid in self.callees else []
        else:  # at the end: the collected functions themselves (an item's function is not resolved again)
            checked = [(None, function, shape, function) for function, shape in self.callees.values()]
        for item, function, shape, now in checked:
            if now is not function or not _same(_shape(now), shape):
                code = getattr(now, "__code__", None)
                module = getattr(getattr(item, "module", None), "__name__", None) or getattr(
                    function, "__module__", "?"
                )
                name = f"{module}.{getattr(function, '__qualname__', '?')}"
                self.patch(f"{name} changed since collected", getattr(code, "co_filename", "?"))
        spaces = list(self.namespaces.values())
        if only is not None:  # before a test: its own module (each module is looked at before its own tests)
            spaces = [space for space in spaces if space[0] is getattr(only, "module", None)]
        for module, names in spaces:
            for name, value in list(vars(module).items()):
                original = names.get(name, _MISSING)
                if original is value:
                    continue
                # what the candidate could turn a test with: a builtin the module now shadows, or a name bound to
                # data or to code it did not write (a setup function's new globals and repository objects are not)
                if original is _MISSING and name not in _BUILTIN_NAMES:
                    continue
                if original is not _MISSING and not all(map(self.trusted, _origin(original))):
                    continue
                untrusted = [f for f in _origin(value) if not self.trusted(f)]
                if untrusted:
                    self.patch(f"{module.__name__}.{name}", untrusted[0])

    def patch(self, what: str, where: str) -> None:
        if what not in self.flagged:  # once each: a record line per test call would grow with the run
            self.flagged.add(what)
            self.write("patched", what, where)

    def check_internals(self) -> None:
        for name, module in self.modules.items():
            if sys.modules.get(name) is not module:
                now = sys.modules.get(name)
                where = getattr(now, "__file__", None) or "<no code>"
                if not self.trusted(where):
                    self.write("patched", name, where)
        current: dict[str, object] = {}
        for module in self.modules.values():
            if isinstance(module, types.ModuleType):
                current.update(_members(module))
        for key, original in self.members.items():
            now = current.get(key)
            if now is original or (now is not None and getattr(now, "__code__", 0) is getattr(original, "__code__", 1)):
                continue
            where = [f for f in _code_files(now) if not self.trusted(f)] if now is not None else ["<removed>"]
            if where:
                self.write("patched", key, where[0])


_H: _Harness | None = None
if __name__ == NAME:
    try:
        _H = _Harness(os.path.dirname(os.path.abspath(__file__)))
    except FileNotFoundError:  # no key: a pytest started after the graded one (a test's subprocess, a worker)
        _H = None


def _ours(config: object) -> bool:
    return _H is not None and config is _H.config


def pytest_configure(config) -> None:
    if _H is not None and _H.config is None:
        _H.config = config
        _H.write("configure", str(config.rootpath), str(config.invocation_params.dir))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session) -> None:
    if _ours(session.config):
        _H.session = session


@pytest.hookimpl(tryfirst=True)
def pytest_collectreport(report) -> None:
    if _H is not None and _H.session is not None and report.failed:
        _H.write("collect", _H.config.cwd_relative_nodeid(report.nodeid)[:MAX_ID], report.outcome)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report) -> None:
    if _H is not None and _H.session is not None:
        node = _H.config.cwd_relative_nodeid(report.nodeid)[:MAX_ID]
        _H.write("report", node, report.when, report.outcome, hasattr(report, "wasxfail"))


@pytest.hookimpl(tryfirst=True)
def pytest_itemcollected(item) -> None:
    if _H is not None and _H.session is not None and _ours(item.config):
        _H.collected(item)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item) -> None:
    if _H is not None and _H.session is not None and _ours(item.config):
        _H.check_tests(item)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session) -> None:
    if _ours(session.config):
        _H.check_files("collection")
        _H.check_modules()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    if _ours(session.config):
        _H.check_files("session")
        _H.check_modules()
        _H.check_tests()
        _H.check_hooks()
        _H.check_internals()
        _H.write("finish", int(exitstatus), session.testscollected, session.testsfailed)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config) -> None:
    if _ours(config) and _H.session is not None:
        _H.write("end", int(_H.session.exitstatus))
        os.close(_H.fd)
        _H.fd = None
