"""Splitting assert-based tests so expected values never enter the container.

An assert such as ``assert abs(candidate(1.5) - 0.5) < 1e-6`` is split on the
host with `ast` into

* **leaves**: the candidate-side expressions (``candidate(1.5)``), evaluated
  inside the grading container by the driver and serialised to plain values;
* the **host expression**: everything else (``abs(LEAF0 - 0.5) < 1e-6``),
  evaluated on the host by a small interpreter over constants, the decoded
  leaf values and a whitelist of pure builtins (`HOST_FUNCTIONS`).

A leaf is a name, a call of a non-whitelisted function, or an attribute that
is not a whitelisted constant (``candidate(x)``, ``Solution().f(x)``,
``candidate(x).lower()``); its arguments are the test's *inputs* and go in
with it. A leaf may only contain calls, names, attributes, subscripts and
literal/arithmetic inputs: never a comparison, boolean operator, lambda,
comprehension or conditional, so no test logic that could judge a candidate
value (and be fooled by it) ever runs inside. The host grammar covers constants, containers, arithmetic,
comparisons (``==``, ``<``, ``in``, ``is`` ...), ``and``/``or``/``not``,
subscripts, conditional expressions and whitelisted calls (``abs``,
``sorted``, ``set``, ``math.isclose`` ...), which covers ``assert X == Y``,
``assert X``, ``assert not X``, ``assert abs(A - B) < tol`` and
``assert math.isclose(A, B)``.

With ``candidates`` (the names the candidate's program answers through:
its function, ``candidate``, ``Solution``) every leaf must be rooted in one
of them: the outermost call, attribute or subscript chain of the leaf starts
at a candidate name (``candidate(x)``, ``f(x)[0]``, ``Solution().f(x)``). A
leaf rooted elsewhere (``math.factorial(5)``, ``check(candidate(1))``) would
compute an expected value or run a check in the candidate's interpreter,
where the candidate can patch what it uses: such an assert does not split.

An assert that uses anything else (a lambda, a comprehension, a starred
argument) cannot be split either: `split` returns None, and the grader
refuses the test for reward (reported) rather than run it whole in the
candidate's interpreter, where frame walking, objects equal to everything or
patched modules forge a pass. Host evaluation uses plain Python semantics on
the decoded values (no tolerance beyond what the assert itself writes), so a
split assert passes exactly when the original would have, given the same
values.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LEAF_PREFIX = "__leaf"

# Pure builtins the host may apply to decoded plain values.
HOST_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "all": all,
    "any": any,
    "bool": bool,
    "dict": dict,
    "float": float,
    "frozenset": frozenset,
    "int": int,
    "isinstance": isinstance,
    "len": len,
    "list": list,
    "max": max,
    "min": min,
    "round": round,
    "set": set,
    "sorted": sorted,
    "str": str,
    "sum": sum,
    "tuple": tuple,
    "type": type,
    "math.isclose": math.isclose,
    "math.fabs": math.fabs,
    "math.isnan": math.isnan,
    "math.isinf": math.isinf,
    "math.isfinite": math.isfinite,
    "math.floor": math.floor,
    "math.ceil": math.ceil,
    "math.sqrt": math.sqrt,
    "math.factorial": lambda n: math.factorial(_bounded(n)),
    "math.comb": math.comb,
    "math.perm": math.perm,
    "math.gcd": math.gcd,
    "math.lcm": math.lcm,
    "math.log": math.log,
    "math.log2": math.log2,
    "math.log10": math.log10,
    "math.exp": math.exp,
    "math.trunc": math.trunc,
    "math.fsum": math.fsum,
    "math.prod": math.prod,
    "divmod": divmod,
    "ord": ord,
    "chr": chr,
}
# Names and dotted attributes that are host constants.
HOST_VALUES: dict[str, Any] = {
    "math.pi": math.pi,
    "math.e": math.e,
    "math.inf": math.inf,
    "math.nan": math.nan,
    "math.tau": math.tau,
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "list": list,
    "tuple": tuple,
    "dict": dict,
    "set": set,
    "frozenset": frozenset,
    "NoneType": type(None),
}

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Invert: operator.invert}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_MAX_POW_EXPONENT = 10_000
_MAX_SEQUENCE_REPEAT = 1 << 20


# What a candidate-side expression may contain: calls, names, attributes and input literals. Anything
# that could test a candidate value inside the container (a comparison, a lambda, a comprehension,
# a conditional) is refused, so a leaf can only *produce* values for the host to judge.
_LEAF_NODES = (
    ast.Call,
    ast.Name,
    ast.Attribute,
    ast.Constant,
    ast.List,
    ast.Tuple,
    ast.Set,
    ast.Dict,
    ast.Subscript,
    ast.Slice,
    ast.UnaryOp,
    ast.BinOp,
    ast.keyword,
    ast.Load,
    ast.expr_context,
    ast.unaryop,
    ast.operator,
)


class HostEvalError(Exception):
    """The host side of a split assert raised (e.g. a candidate value of the wrong type)."""


def _bounded(n: Any) -> Any:
    if isinstance(n, int) and n > _MAX_POW_EXPONENT:
        raise HostEvalError("argument too large for host evaluation")
    return n


def spine_root(node: ast.expr) -> str | None:
    """The name a call/attribute/subscript chain starts from: ``candidate`` in ``candidate(x).y[0]``."""
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.Name):
            return node.id
        else:
            return None


@dataclass(frozen=True)
class SplitAssert:
    """An assert split into candidate-side leaves and a host expression over ``__leafN`` names."""

    leaves: tuple[str, ...]  # source of each candidate-side expression, evaluated inside
    host: ast.Expression  # the assert's test with leaves replaced by names __leaf0, __leaf1, ...
    host_source: str  # ast.unparse of ``host``, for reports


def dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def names_in(node: ast.AST) -> set[str]:
    """The names an expression takes from its environment, minus the host whitelist."""
    host_roots = {
        id(sub.value)
        for sub in ast.walk(node)
        if isinstance(sub, ast.Attribute)
        and isinstance(sub.value, ast.Name)
        and dotted(sub) in HOST_VALUES.keys() | HOST_FUNCTIONS.keys()
    }
    return {
        sub.id
        for sub in ast.walk(node)
        if isinstance(sub, ast.Name)
        and id(sub) not in host_roots
        and sub.id not in HOST_VALUES
        and sub.id not in HOST_FUNCTIONS
    }


class _Splitter:
    def __init__(self, candidates: frozenset[str] | None) -> None:
        self.leaves: list[str] = []
        self.candidates = candidates

    def leaf(self, node: ast.expr) -> ast.expr:
        for sub in ast.walk(node):
            if not isinstance(sub, _LEAF_NODES):
                raise ValueError(f"{type(sub).__name__} inside a candidate-side expression")
        if self.candidates is not None and spine_root(node) not in self.candidates:
            raise ValueError(f"{ast.unparse(node)!r} is not rooted in the candidate: it would run in its interpreter")
        self.leaves.append(ast.unparse(node))
        return ast.Name(id=f"{LEAF_PREFIX}{len(self.leaves) - 1}", ctx=ast.Load())

    def visit(self, node: ast.expr) -> ast.expr:
        """The host form of ``node``; raises ValueError for a form the host grammar lacks."""
        if isinstance(node, ast.Constant):
            return node
        if isinstance(node, (ast.Name, ast.Attribute)):
            return node if dotted(node) in HOST_VALUES else self.leaf(node)
        if isinstance(node, ast.Call):
            if dotted(node.func) not in HOST_FUNCTIONS:
                return self.leaf(node)
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                raise ValueError("starred arguments in a host call")
            return ast.Call(
                func=node.func,
                args=[self.visit(a) for a in node.args],
                keywords=[ast.keyword(arg=k.arg, value=self.visit(k.value)) for k in node.keywords],
            )
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            if any(isinstance(e, ast.Starred) for e in node.elts):
                raise ValueError("starred element")
            return type(node)(elts=[self.visit(e) for e in node.elts], ctx=ast.Load())
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise ValueError("dict unpacking")
            return ast.Dict(keys=[self.visit(k) for k in node.keys], values=[self.visit(v) for v in node.values])
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return ast.UnaryOp(op=node.op, operand=self.visit(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return ast.BinOp(left=self.visit(node.left), op=node.op, right=self.visit(node.right))
        if isinstance(node, ast.BoolOp):
            return ast.BoolOp(op=node.op, values=[self.visit(v) for v in node.values])
        if isinstance(node, ast.Compare):
            return ast.Compare(
                left=self.visit(node.left), ops=node.ops, comparators=[self.visit(c) for c in node.comparators]
            )
        if isinstance(node, ast.Subscript):
            return ast.Subscript(value=self.visit(node.value), slice=self.visit(node.slice), ctx=ast.Load())
        if isinstance(node, ast.Slice):
            return ast.Slice(
                *(None if part is None else self.visit(part) for part in (node.lower, node.upper, node.step))
            )
        if isinstance(node, ast.IfExp):
            return ast.IfExp(test=self.visit(node.test), body=self.visit(node.body), orelse=self.visit(node.orelse))
        raise ValueError(f"{type(node).__name__} is outside the host grammar")


def parse_assert(source: str) -> ast.Assert | None:
    """The single assert statement ``source`` holds, else None."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    return tree.body[0]


def split(source: str, candidates: frozenset[str] | None = None) -> SplitAssert | None:
    """Split one assert statement; None when it cannot be (see the module docstring)."""
    statement = parse_assert(source)
    if statement is None:
        return None
    splitter = _Splitter(candidates)
    try:
        host = ast.Expression(body=splitter.visit(statement.test))
    except ValueError:
        return None
    ast.fix_missing_locations(host)
    return SplitAssert(leaves=tuple(splitter.leaves), host=host, host_source=ast.unparse(host))


def _checked_binary(op: ast.operator, left: Any, right: Any) -> Any:
    # Candidate values are bounded by the output limit, but ``x ** y`` or ``s * n`` on them could still
    # make the host burn CPU or memory: refuse sizes no test needs.
    if isinstance(op, ast.Pow) and isinstance(right, int) and abs(right) > _MAX_POW_EXPONENT:
        raise HostEvalError("exponent too large for host evaluation")
    if isinstance(op, ast.LShift) and isinstance(right, int) and right > _MAX_POW_EXPONENT:
        raise HostEvalError("shift too large for host evaluation")
    if isinstance(op, ast.Mult):
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, list, tuple)) and isinstance(count, int):
                if len(seq) * count > _MAX_SEQUENCE_REPEAT:
                    raise HostEvalError("sequence repeat too large for host evaluation")
    return _BINARY[type(op)](left, right)


def _eval(node: ast.AST, leaves: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in leaves:
        return leaves[node.id]
    if isinstance(node, (ast.Name, ast.Attribute)):
        return HOST_VALUES[dotted(node)]
    if isinstance(node, ast.Call):
        args = [_eval(a, leaves) for a in node.args]
        kwargs = {k.arg: _eval(k.value, leaves) for k in node.keywords}
        return HOST_FUNCTIONS[dotted(node.func)](*args, **kwargs)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [_eval(e, leaves) for e in node.elts]
        return {ast.Tuple: tuple, ast.List: list, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict):
        return {_eval(k, leaves): _eval(v, leaves) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, leaves))
    if isinstance(node, ast.BinOp):
        return _checked_binary(node.op, _eval(node.left, leaves), _eval(node.right, leaves))
    if isinstance(node, ast.BoolOp):
        is_and = isinstance(node.op, ast.And)
        value = None
        for sub in node.values:
            value = _eval(sub, leaves)
            if bool(value) != is_and:
                return value
        return value
    if isinstance(node, ast.Compare):
        left = _eval(node.left, leaves)
        for op, comparator in zip(node.ops, node.comparators):
            right = _eval(comparator, leaves)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Subscript):
        return _eval(node.value, leaves)[_eval(node.slice, leaves)]
    if isinstance(node, ast.Slice):
        return slice(*(None if p is None else _eval(p, leaves) for p in (node.lower, node.upper, node.step)))
    if isinstance(node, ast.IfExp):
        return _eval(node.body, leaves) if _eval(node.test, leaves) else _eval(node.orelse, leaves)
    raise HostEvalError(f"{type(node).__name__} reached the host evaluator")  # split() never produces it


def holds(split_assert: SplitAssert, values: list[Any]) -> bool:
    """Whether the assert holds for these decoded leaf values (Python semantics, on the host).

    Raises `HostEvalError` when the host side raises, as the original assert
    would have raised instead of passing.
    """
    if len(values) != len(split_assert.leaves):
        raise HostEvalError(f"{len(values)} values for {len(split_assert.leaves)} leaves")
    leaves = {f"{LEAF_PREFIX}{i}": value for i, value in enumerate(values)}
    try:
        return bool(_eval(split_assert.host.body, leaves))
    except HostEvalError:
        raise
    except Exception as err:  # the original assert would have raised here too: a failed test, not a crash
        raise HostEvalError(f"{type(err).__name__}: {err}") from err
