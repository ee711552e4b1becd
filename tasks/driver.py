"""The grader-owned driver, run inside the grading container as ``python3 -I -c <this source>``.

It is a standalone program (stdlib only, no imports from this repository):
the host reads this file's text and passes it in argv, so there is no driver
file in the container for a candidate to overwrite between tests.

Protocol: one request on stdin, a dict in `marshal` format (version 4: plain
values only, and a builtin module, so reading it imports nothing; JSON would
pull in ``re`` and cost more than the interpreter's own start-up)::

    {"nonce": str, "program": path of the candidate source, "mode": "call" | "eval",
     "fn_name": str, "args": [...],              # call: fn_name(*args), or Solution().fn_name(*args)
     "setup": str, "candidate": str | null,      # eval: setup statements; name bound to `candidate`
     "exprs": [str, ...]}                        # eval: candidate-side expressions of a split assert

and one line on stdout, ``<nonce> <json>`` with the JSON one of
``{"value": V}``, ``{"values": [V, ...]}``,
``{"error": "Type: message"}`` or ``{"unserialisable": "type name"}``, where
V is the tagged encoding of `tasks.encoding`.

Hardening, knowing the candidate runs in this very process: the request
(nonce included) is read and every function and type the driver needs is
bound to a local before the candidate is compiled, so patching ``json``,
``print``, ``builtins`` or ``sys.stdout`` changes nothing here; the report is
serialised by the driver's own writer (C string quoting, ``int.__repr__``,
``float.__repr__``), not by ``json`` whose Python code looks names up in
builtins at call time, and written with a bound ``os.write`` to fd 1 and the process leaves with
``os._exit`` (no atexit hooks of the candidate run). None of this is what
makes grading safe: expected values never enter the container, so whatever
the candidate forges is at best a value it chose without knowing the answer.
"""


def _main():
    import _json
    import binascii
    import marshal
    import os
    import sys

    _type, _len, _getattr, _hasattr, _isinstance = type, len, getattr, hasattr, isinstance
    _none, _bool, _int, _float, _str, _bytes, _complex = type(None), bool, int, float, str, bytes, complex
    _list, _tuple, _set, _frozenset, _dict = list, tuple, set, frozenset, dict
    _exec, _eval, _compile, _open = exec, eval, compile, open
    _base_exception, _base_str = BaseException, BaseException.__str__
    _b64, _inf = binascii.b2a_base64, float("inf")
    _write, _exit = os.write, os._exit
    _quote = _json.encode_basestring_ascii  # C function: JSON string literal, pure ASCII
    _int_text, _float_text, _join = int.__repr__, float.__repr__, ",".join

    request = marshal.loads(sys.stdin.buffer.read())
    nonce = request["nonce"]

    class Unserialisable(Exception):
        pass

    limits = {"nodes": 0}

    def real(value):
        if value != value:
            return "nan"
        if value == _inf or value == -_inf:
            return "inf" if value > 0 else "-inf"
        return value

    def encode(value, depth=0):
        limits["nodes"] += 1
        if depth > 100 or limits["nodes"] > 1_000_000:
            raise Unserialisable("value too deep or too large")
        kind = _type(value)
        if kind is _none:
            return ["n"]
        if kind is _bool:
            return ["b", value]
        if kind is _int:
            return ["i", value]
        if kind is _float:
            return ["f", real(value)]
        if kind is _str:
            return ["s", value]
        if kind is _bytes:
            return ["y", _b64(value, newline=False).decode("ascii")]
        if kind is _complex:
            return ["c", [real(value.real), real(value.imag)]]
        if kind is _list or kind is _tuple or kind is _set or kind is _frozenset:
            tag = "l" if kind is _list else "t" if kind is _tuple else "S" if kind is _set else "F"
            return [tag, [encode(item, depth + 1) for item in value]]
        if kind is _dict:
            return ["d", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in _dict.items(value)]]
        raise Unserialisable(kind.__name__)

    def to_json(value):
        # Our own writer over the tagged form (lists, str, int, float, bool, None): json's Python-level
        # encoder looks names up in builtins at call time, which the candidate may have patched.
        kind = _type(value)
        if kind is _str:
            return _quote(value)
        if kind is _list:
            return "[" + _join([to_json(item) for item in value]) + "]"
        if kind is _bool:
            return "true" if value else "false"
        if kind is _int:
            return _int_text(value)
        if kind is _float:
            return _float_text(value)
        if kind is _none:
            return "null"
        if kind is _dict:
            return "{" + _join([_quote(k) + ":" + to_json(v) for k, v in _dict.items(value)]) + "}"
        raise Unserialisable(kind.__name__)

    def report(payload):
        try:
            line = nonce + " " + to_json(payload)
        except _base_exception:
            line = nonce + ' {"unserialisable":"value"}'  # e.g. an int beyond the digit limit
        _write(1, ("\n" + line + "\n").encode("ascii", "backslashreplace"))
        _exit(0)

    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        with _open(request["program"], "r", encoding="utf-8") as handle:
            source = handle.read()
        code = _compile(source, "solution.py", "exec")
        mode = request["mode"]
        _exec(code, namespace)
        if mode == "call":
            name = request["fn_name"]
            holder = namespace.get("Solution")
            if _isinstance(holder, _type) and _hasattr(holder, name):
                function = _getattr(holder(), name)
            elif name in namespace:
                function = namespace[name]
            else:
                report({"error": "NameError: no function or Solution method " + name})
            result = function(*request["args"])
            try:
                report({"value": encode(result)})
            except Unserialisable as err:
                report({"unserialisable": _base_str(err)})
        if request.get("setup"):
            _exec(_compile(request["setup"], "setup.py", "exec"), namespace)
        if request.get("candidate"):
            namespace["candidate"] = namespace[request["candidate"]]
        if mode == "eval":
            values = [_eval(_compile(expr, "test.py", "eval"), namespace) for expr in request["exprs"]]
            try:
                report({"values": [encode(value) for value in values]})
            except Unserialisable as err:
                report({"unserialisable": _base_str(err)})
        report({"error": "ValueError: unknown mode"})
    except _base_exception as err:  # SystemExit, SkipTest, KeyboardInterrupt ... all are failures
        try:
            text = _type(err).__name__ + ": " + _base_str(err)[:300]
        except _base_exception:
            text = "exception"
        report({"error": text})


if __name__ == "__main__":
    _main()
