"""The grader-owned driver: the candidate's side of every call and assert test, run in the grading container.

It is a standalone program (stdlib only, no imports from this repository):
the host reads this file's text and passes it in argv, so there is no driver
file in the container for a candidate to overwrite between tests.

One-shot modes, ``python3 -I -c <this source>``: one request on stdin, a dict
in `marshal` format (version 4: plain values only, and a builtin module, so
reading it imports nothing; JSON would pull in ``re`` and cost more than the
interpreter's own start-up)::

    {"nonce": str, "program": path of the candidate source, "mode": "call" | "eval",
     "fn_name": str, "args": [...],              # call: fn_name(*args), or Solution().fn_name(*args)
     "setup": str, "candidate": str | null,      # eval: setup statements; name bound to `candidate`
     "exprs": [str, ...]}                        # eval: candidate-side expressions of a split assert

and one line on stdout, ``<nonce> <json>`` with the JSON one of
``{"value": V}``, ``{"values": [V, ...]}``,
``{"error": "Type: message"}`` or ``{"unserialisable": "type name"}``, where
V is the tagged encoding of `tasks.encoding`. A call's value must be plain
data; a value of a split assert that is not crosses as its truth value only
(``["o", true]``: an object that equals nothing but itself).

Serve mode, ``python3 -I -c <this source> serve``: started by the checker
(`tasks/checker.py`) for an assert test that runs in its own process. Frames
(a 4-byte big-endian length, then the body) on fds 0 and 1, which the server
moves to private descriptors before the candidate's code runs (its own
stdout and stderr go to /dev/null). Requests are marshal dicts, replies JSON
objects of tagged values::

    {"program": path, "names": [...]}        -> {"names": {name: [kind, ...]}} | {"load_error": "Type: message"}
    {"op": "call", "target": name | handle, "args": V, "kwargs": V}
    {"op": "getattr" | "setattr" | "bool", "target": handle, "name": str, "value": V}
                                             -> {"value": V} | {"raise": [builtin class, message]}
                                                | {"unserialisable": "reason"}

A name is a ``function``, a ``class``, a ``module`` or a ``stdlib`` object
(with its module's name), a ``value`` or ``missing``. A value that is not
plain data (what a class the test calls makes, a ``re.Match``, an object with
a rigged ``__eq__``) stays in this process and crosses as a handle
``["r", id]``: the checker can pass it back, read or set its attributes, call
it, or ask its truth value, each answered with plain data. A checker-side
callable the test passes in (``["k", id]``) is a stub here that asks the
checker (``{"callback": id, "args": V, "kwargs": V}``) and waits for its
``{"value": V}`` or ``{"raise": [...]}``. Arguments may also hold builtin
types (``["T", "int"]``), ranges (``["R", [start, stop, step]]``) and names of
this module's globals (``["g", name]``).

Hardening, knowing the candidate runs in this very process: the request
(nonce included) is read and every function and type the driver needs is
bound to a local before the candidate is compiled, so patching ``json``,
``print``, ``builtins`` or ``sys.stdout`` changes nothing here; the report is
serialised by the driver's own writer (C string quoting, ``int.__repr__`` or,
past `BIG_INT_BITS`, ``int.__format__`` in hexadecimal, ``float.__repr__``), not
by ``json`` whose Python code looks names up in builtins at call time, and
written with a bound ``os.write`` to fd 1 and the process leaves with
``os._exit`` (no atexit hooks of the candidate run). None of this is what
makes grading safe: in the one-shot modes expected values never enter the
container, and in serve mode they stay in the checker's process, so whatever
the candidate forges is at best a value it chose without knowing the answer.
"""

BIG_INT_BITS = 14_000
"""An int of more bits (~4,200 decimal digits) crosses as ``["ix", hex]``: CPython refuses decimal text past 4,300
digits (``sys.get_int_max_str_digits``), and reading it back is quadratic; hexadecimal is neither."""


def _main():
    import _json
    import binascii
    import builtins
    import marshal
    import os
    import sys

    _type, _len, _getattr, _hasattr, _isinstance = type, len, getattr, hasattr, isinstance
    _setattr, _iter, _range, _callable, _id = setattr, iter, range, callable, id
    _min, _any, _issubclass, _exception = min, any, issubclass, Exception
    _none, _bool, _int, _float, _str, _bytes, _complex = type(None), bool, int, float, str, bytes, complex
    _list, _tuple, _set, _frozenset, _dict = list, tuple, set, frozenset, dict
    _dict_items, _list_iter = dict.items, list.__iter__
    _exec, _eval, _compile, _open = exec, eval, compile, open
    _base_exception, _base_str, _modules = BaseException, BaseException.__str__, sys.modules
    _b64, _a2b, _inf = binascii.b2a_base64, binascii.a2b_base64, float("inf")
    _read, _write, _exit, _dup, _dup2, _devnull = os.read, os.write, os._exit, os.dup, os.dup2, os.devnull
    _loads, _from_bytes, _to_bytes = marshal.loads, int.from_bytes, int.to_bytes
    _quote = _json.encode_basestring_ascii  # C function: JSON string literal, pure ASCII
    _int_text, _float_text, _join = int.__repr__, float.__repr__, ",".join
    _int_format, _bit_length = int.__format__, int.bit_length
    _builtin_types = {
        t.__name__: t
        for t in (_none, _bool, _int, _float, _str, _bytes, _complex, _list, _tuple, _set, _frozenset, _dict, _type)
    }
    _builtin_types.update({"object": object, "bytearray": bytearray, "range": _range})
    _builtin_names = _dict(_dict_items(vars(builtins)))  # the builtins as they were before the candidate ran
    _dict_classes = ("Counter", "OrderedDict", "defaultdict")
    _stdlib = sys.stdlib_module_names

    serving = sys.argv[1:] == ["serve"]
    if serving:  # the protocol moves off fds 0/1: the candidate's prints and reads reach /dev/null only
        channel_in, channel_out = _dup(0), _dup(1)
        null = os.open(_devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            _dup2(null, fd)
        nonce = None
    else:
        request = _loads(sys.stdin.buffer.read())
        nonce = request["nonce"]

    class Unserialisable(Exception):
        pass

    limits = {"nodes": 0}
    handles = {"ids": {}, "objects": {}}  # serve mode: objects the checker holds handles to

    def real(value):
        if value != value:
            return "nan"
        if value == _inf or value == -_inf:
            return "inf" if value > 0 else "-inf"
        return value

    def stdlib_dict(kind):
        # Counter / OrderedDict / defaultdict cross as the plain dict of their items (read with dict's own
        # method, so no override of theirs runs): what crosses is data either way.
        collections = _modules.get("collections")
        return collections is not None and _any(kind is _getattr(collections, name, None) for name in _dict_classes)

    def encode(value, depth=0, other=None):
        """The tagged form; ``other`` says what a value that is not plain data becomes: refused (None), its
        truth value only ("opaque"), or a handle to it ("handle")."""
        limits["nodes"] += 1
        if depth > 100 or limits["nodes"] > 1_000_000:
            raise Unserialisable("value too deep or too large")
        kind = _type(value)
        if kind is _none:
            return ["n"]
        if kind is _bool:
            return ["b", value]
        if kind is _int:  # past ~4200 digits in hexadecimal: decimal text is refused there (and quadratic)
            return ["i", value] if _bit_length(value) <= BIG_INT_BITS else ["ix", _int_format(value, "x")]
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
            return [tag, [encode(item, depth + 1, other) for item in value]]
        if kind is _dict or stdlib_dict(kind):
            pairs = _dict_items(value)
            return ["d", [[encode(k, depth + 1, other), encode(v, depth + 1, other)] for k, v in pairs]]
        if kind is _type and _builtin_types.get(_getattr(value, "__name__", None)) is value:
            return ["T", value.__name__]
        if _hasattr(kind, "__next__") and _hasattr(kind, "__iter__"):  # an iterator: the items it yields
            items = []
            for item in value:
                items.append(encode(item, depth + 1, other))
            return ["I", items]
        if other == "handle":
            return handle(value)
        if other == "opaque":
            return ["o", _bool(value)]
        raise Unserialisable(kind.__name__)

    def handle(value):
        key = _id(value)
        if key not in handles["ids"]:
            handles["ids"][key] = _len(handles["objects"])
            handles["objects"][handles["ids"][key]] = value
        return ["r", handles["ids"][key]]

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
            return "{" + _join([_quote(k) + ":" + to_json(v) for k, v in _dict_items(value)]) + "}"
        raise Unserialisable(kind.__name__)

    def report(payload):
        try:
            line = nonce + " " + to_json(payload)
        except _base_exception:
            line = nonce + ' {"unserialisable":"value"}'  # e.g. an int beyond the digit limit
        _write(1, ("\n" + line + "\n").encode("ascii", "backslashreplace"))
        _exit(0)

    def error_text(err):
        try:
            return _type(err).__name__ + ": " + _base_str(err)[:300]
        except _base_exception:
            return "exception"

    namespace = {"__name__": "solution", "__builtins__": __builtins__}

    def load(path):
        with _open(path, "r", encoding="utf-8") as source:
            code = _compile(source.read(), "solution.py", "exec")
        _exec(code, namespace)

    # ------------------------------------------------------------------ serve mode

    def send(payload):
        try:
            body = to_json(payload).encode("ascii", "backslashreplace")
        except _base_exception:  # e.g. an int beyond the digit limit
            body = b'{"unserialisable":"value"}'
        data = _to_bytes(_len(body), 4, "big") + body
        while data:
            data = data[_write(channel_out, data) :]

    def receive():
        size = _from_bytes(read_exactly(4), "big")
        return _loads(read_exactly(size))

    def read_exactly(size):
        chunks, left = [], size
        while left:
            chunk = _read(channel_in, _min(left, 1 << 20))
            if not chunk:  # the checker is gone: nothing left to answer
                _exit(0)
            chunks.append(chunk)
            left -= _len(chunk)
        return b"".join(chunks)

    def decode(value):
        tag = value[0]
        if tag == "n":
            return None
        payload = value[1]
        if tag in ("b", "i", "s"):
            return payload
        if tag == "f":
            return {"nan": _float("nan"), "inf": _inf, "-inf": -_inf}.get(payload, payload) * 1.0
        if tag == "y":
            return _a2b(payload)
        if tag == "c":
            return _complex(decode(["f", payload[0]]), decode(["f", payload[1]]))
        if tag in ("l", "t", "S", "F", "I"):
            items = [decode(item) for item in payload]
            return {"l": _list, "t": _tuple, "S": _set, "F": _frozenset, "I": _iter}[tag](items)
        if tag == "d":
            return {decode(k): decode(v) for k, v in payload}
        if tag == "T":
            return _builtin_types[payload]
        if tag == "R":
            return _range(*payload)
        if tag == "r":
            return handles["objects"][payload]
        if tag == "g":
            return namespace[payload]
        if tag == "k":
            return stub(payload)
        raise ValueError("unknown tag " + _str(tag))

    def stub(callback):
        def call_checker(*args, **kwargs):
            args, kwargs = encode(_list(args), other="handle"), encode(kwargs, other="handle")
            send({"callback": callback, "args": args, "kwargs": kwargs})
            reply = receive()
            if "raise" in reply:
                raise rebuilt(*reply["raise"])
            return decode(reply["value"])

        return call_checker

    def rebuilt(name, message):
        cls = _builtin_names.get(name)
        if _isinstance(cls, _type) and _issubclass(cls, _exception):
            try:
                return cls(message)
            except _base_exception:
                pass
        return _exception(message)

    def builtin_class(err):
        # the nearest builtin class of what the candidate raised, so `except ValueError` in a test still works
        for cls in _type(err).__mro__:
            if _builtin_names.get(_getattr(cls, "__name__", None)) is cls:
                return cls.__name__
        return "Exception"

    def describe(name):
        if name not in namespace:
            return ["missing"]
        value = namespace[name]
        kind = _type(value)
        if kind is _type(sys):
            return ["module", _str(_getattr(value, "__name__", ""))]
        origin, qualname = _getattr(value, "__module__", None), _getattr(value, "__qualname__", None)
        if _type(origin) is _str and origin.split(".")[0] in _stdlib and qualname == name:
            return ["stdlib", origin]  # the checker takes the object from its own import of that module
        if _isinstance(value, _type):
            return ["class"]
        if _callable(value):
            return ["function"]
        return ["value", encode(value, other="handle")]

    def answer(request):
        op, target = request["op"], request["target"]
        subject = namespace[target] if _type(target) is _str else handles["objects"][target]
        if op == "call":
            result = subject(*decode(request["args"]), **decode(request["kwargs"]))
            if _isinstance(subject, _type):  # an object the test made: it stays here, whatever it is
                return {"value": handle(result)}
        elif op == "getattr":
            result = _getattr(subject, request["name"])
        elif op == "setattr":
            _setattr(subject, request["name"], decode(request["value"]))
            result = None
        else:
            result = _bool(subject)
        limits["nodes"] = 0
        try:
            return {"value": encode(result, other="handle")}
        except Unserialisable as err:
            return {"unserialisable": _base_str(err)}

    def serve():
        start = receive()
        try:
            load(start["program"])
        except _base_exception as err:  # SystemExit, SkipTest ... at import: a failure, never a pass
            send({"load_error": error_text(err)})
            _exit(0)
        send({"names": {name: describe(name) for name in start["names"]}})
        while True:
            request = receive()
            try:
                reply = answer(request)
            except _base_exception as err:  # the checker decides what a SystemExit means
                try:
                    message = _base_str(err)[:300]
                except _base_exception:
                    message = ""
                reply = {"raise": [builtin_class(err), message]}
            send(reply)

    if serving:
        serve()

    # ------------------------------------------------------------------ one-shot modes

    try:
        load(request["program"])
        mode = request["mode"]
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
                report({"values": [encode(value, other="opaque") for value in values]})
            except Unserialisable as err:
                report({"unserialisable": _base_str(err)})
        report({"error": "ValueError: unknown mode"})
    except _base_exception as err:  # SystemExit, SkipTest, KeyboardInterrupt ... all are failures
        report({"error": error_text(err)})


if __name__ == "__main__":
    _main()
