"""The grader-owned checker: runs an assert test's own code in a process the candidate never shares.

Run inside the grading container as ``python3 -I -c <this source>`` for an
assert test the host cannot split (a loop, a helper of the test, a prompt
helper the test calls, a random property check, an expected value computed
by a library call). Standalone (stdlib only), like the driver. One request
on stdin, a `marshal` dict::

    {"nonce": str, "program": path, "driver": the -c program of tasks/driver.py (tasks.grader.driver_program),
     "python": [argv prefix],
     "names": [names the test takes from the candidate's module], "candidate": name | None,
     "prelude": str,   # statements from the task's own text: the prompt's helpers, the reference's imports
     "setup": str,     # test set-up code (MBPP test_setup_code / test_imports, HumanEval imports)
     "test": str}      # the test code: an assert, or a whole check module ending in check(entry_point)

It makes itself non-dumpable (``PR_SET_DUMPABLE`` 0: the candidate runs
under the same uid, and that is what keeps it from opening
``/proc/<checker>/mem`` or ``fd``; ptrace and process_vm_readv are denied by
the seccomp profile), then starts the candidate as the driver's serve mode
(`tasks/driver.py`) in a child process that holds none of the checker's
descriptors: its stdin, stdout and stderr are the protocol pipes and
/dev/null. The test runs here, over a namespace where every name it takes
from the candidate is a proxy: calls send their arguments as tagged plain
data and get plain data back (or a description of the exception raised,
re-raised here as a fresh instance of the builtin class of that name), so no
object of the candidate's, patched module or forged exception ever exists in
this process. A value of the candidate's that is not plain data is a handle
here (`Ref`): the test can pass it back, read or set its attributes, call it
or truth-test it (each a request answered with plain data); compared, it
equals only itself. Names the task's own text defines (prelude) are never
taken from the candidate, and of the names the candidate's module defines only
those the host asks for (``names``) are bound: a name the candidate adds to its
reply (``range``, ``all``) is ignored.

The verdict is one line on this process's stdout, ``<nonce> {"verdict":
{"outcome": O, "detail": str}}``, written with ``os.write`` to fd 1, which
only this process holds (the test's own prints go to /dev/null). Outcomes:

* ``passed``: the test ran to its end and nothing was aborted;
* ``assertion``: an assert of the test failed (the detail names its line, never its message);
* ``raised``: an exception the candidate raised escaped the test;
* ``test_error``: the test's own code raised on the candidate's values;
* ``aborted``: the candidate's process ended, raised SystemExit / KeyboardInterrupt / GeneratorExit (never a
  test outcome) or StopIteration / StopAsyncIteration (raised in the test they would end its own loops:
  ``all(map(...))`` over no item), broke the protocol, or named as one of its names a module the test then
  passed to it (recorded when it happens, so a test that swallows exceptions still fails);
* ``unsupported``: the test passed a value of its own that cannot cross as data before the candidate answered
  anything (masked: nothing the candidate did);
* ``task_error``: the task's own prelude failed; it runs in a namespace of its own, before the candidate
  starts (masked);
* ``checker_error``: the checker could not make itself non-dumpable or start the candidate (masked).
"""


def _main():
    import sys

    sys.path[:] = [p for p in sys.path if p.startswith("/") and not p.startswith(("/workspace", "/tmp"))]
    import builtins
    import ctypes
    import marshal
    import os
    import signal

    request = marshal.loads(sys.stdin.buffer.read())
    nonce = request["nonce"]
    dumpable = ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    stdout = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # what the test prints goes nowhere; only the verdict reaches the runner
    sys.stdout = sys.__stdout__ = open(null, "w", closefd=False)

    import json

    state = {"abort": None, "answered": False, "raised": None, "pid": None}
    frame_limit = 64 << 20

    def verdict(outcome, detail=""):
        line = nonce + " " + json.dumps({"verdict": {"outcome": outcome, "detail": detail[:300]}})
        data = ("\n" + line + "\n").encode("ascii", "backslashreplace")
        while data:
            data = data[os.write(stdout, data) :]
        if state["pid"]:
            try:
                os.kill(state["pid"], signal.SIGKILL)
            except OSError:
                pass
        os._exit(0)

    class Abort(BaseException):
        """The candidate broke the test; recorded in ``state`` so a test that catches everything still fails."""

    def abort(detail):
        if state["abort"] is None:
            state["abort"] = detail
        raise Abort(detail)

    # ------------------------------------------------------------------ the candidate's process

    def start():
        requests_read, requests_write = os.pipe()
        replies_read, replies_write = os.pipe()
        exec_read, exec_write = os.pipe()  # close-on-exec: EOF here means the interpreter started
        pid = os.fork()
        if pid == 0:  # the child holds only the protocol pipes and /dev/null, then becomes the driver
            try:
                os.dup2(requests_read, 0)
                os.dup2(replies_write, 1)
                os.dup2(null, 2)
                os.closerange(3, exec_write)
                os.closerange(exec_write + 1, 1 << 16)
                argv = [*request["python"], "-c", request["driver"], "serve"]
                os.execvp(argv[0], argv)
            except BaseException as err:
                os.write(exec_write, str(err).encode()[:200] or b"?")
            finally:
                os._exit(127)
        for fd in (requests_read, replies_write, exec_write):
            os.close(fd)
        state["pid"] = pid
        failed = os.read(exec_read, 256)
        os.close(exec_read)
        if failed:  # nothing of the candidate's ran yet: the grader's own failure
            raise OSError(failed.decode(errors="replace"))
        return requests_write, replies_read

    def send(message):
        body = marshal.dumps(message, 4)
        data = len(body).to_bytes(4, "big") + body
        try:
            while data:
                data = data[os.write(channel_out, data) :]
        except OSError as err:
            abort(f"the candidate's process is gone ({err.strerror})")

    def read_exactly(size):
        chunks, left = [], size
        while left:
            try:
                chunk = os.read(channel_in, min(left, 1 << 20))
            except OSError:
                chunk = b""
            if not chunk:
                abort("the candidate's process ended" + ended())
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def ended():
        try:
            pid, status = os.waitpid(state["pid"], os.WNOHANG)
        except OSError:
            return ""
        if pid == 0:
            return ""
        if os.WIFSIGNALED(status):
            return f" (signal {os.WTERMSIG(status)})"
        return f" (exit code {os.waitstatus_to_exitcode(status)})"

    def receive():
        size = int.from_bytes(read_exactly(4), "big")
        if size > frame_limit:
            abort(f"the candidate sent {size} bytes at once")
        try:
            message = json.loads(read_exactly(size))
        except (ValueError, RecursionError) as err:
            abort(f"the candidate's reply is not well-formed data ({type(err).__name__})")
        if not isinstance(message, dict):
            abort("the candidate's reply is not well-formed data")
        return message

    # ------------------------------------------------------------------ values across the boundary

    plain_types = (type(None), bool, int, float, complex, str, bytes, list, tuple, set, frozenset, dict)
    builtin_types = {t.__name__: t for t in (*plain_types, type, object, bytearray, range)}
    callbacks, refs = [], {}
    modules_named = {}  # id -> name: the modules bound because the candidate's module names them (`bind`)

    class Unsupported(Exception):
        pass

    def real(value):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return value

    def encode(value, depth=0):
        """A test value in the tagged form, for the candidate."""
        if depth > 100:
            raise Unsupported("a value nested deeper than 100 levels")
        kind = type(value)
        if kind in (type(None), bool, int, str):
            return ["n"] if value is None else [{bool: "b", int: "i", str: "s"}[kind], value]
        if kind is float:
            return ["f", real(value)]
        if kind is bytes:
            return ["y", __import__("binascii").b2a_base64(value, newline=False).decode("ascii")]
        if kind is complex:
            return ["c", [real(value.real), real(value.imag)]]
        if kind in (list, tuple, set, frozenset):
            return [{list: "l", tuple: "t", set: "S", frozenset: "F"}[kind], [encode(v, depth + 1) for v in value]]
        if kind is dict:
            return ["d", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]]
        if kind is Ref:
            return ["r", object.__getattribute__(value, "_id")]
        if kind in (Function, Class):
            return ["g", object.__getattribute__(value, "_name")]
        if kind is type and builtin_types.get(value.__name__) is value:
            return ["T", value.__name__]
        if kind is range:
            return ["R", [value.start, value.stop, value.step]]
        if callable(value):
            callbacks.append(value)
            return ["k", len(callbacks) - 1]
        if hasattr(kind, "__next__"):
            return ["I", [encode(v, depth + 1) for v in value]]
        if id(value) in modules_named:  # the candidate chose what the name is: its doing, never masked
            abort(f"the candidate's {modules_named[id(value)]} is a module, which cannot cross to it as data")
        raise Unsupported(f"the test passed a {kind.__name__}, which cannot cross to the candidate as data")

    def decode(value, depth=0):
        """A plain value rebuilt from the candidate's tagged data; anything else aborts the test."""
        if depth > 200 or not isinstance(value, list) or not value or not isinstance(value[0], str):
            abort("the candidate's reply is not well-formed data")
        tag, rest = value[0], value[1:]
        if tag == "n" and not rest:
            return None
        if len(rest) != 1:
            abort("the candidate's reply is not well-formed data")
        payload = rest[0]
        simple = {"b": bool, "i": int, "s": str}
        if tag in simple and type(payload) is simple[tag]:
            return payload
        if tag == "ix" and type(payload) is str:  # an int past ~4,200 digits, in hexadecimal (tasks/encoding.py)
            digits = payload[1:] if payload[:1] == "-" else payload
            if digits and set(digits) <= set("0123456789abcdef"):
                return int(payload, 16)
        if tag == "f" and (type(payload) in (int, float) or payload in ("nan", "inf", "-inf")):
            return float(payload)
        if tag == "y" and isinstance(payload, str):
            try:
                return __import__("binascii").a2b_base64(payload)
            except ValueError:
                abort("the candidate's reply is not well-formed data")
        if tag == "c" and isinstance(payload, list) and len(payload) == 2:
            return complex(*(decode(["f", part], depth + 1) for part in payload))
        if tag in ("l", "t", "S", "F", "I") and isinstance(payload, list):
            items = [decode(item, depth + 1) for item in payload]
            try:
                return {"l": list, "t": tuple, "S": set, "F": frozenset, "I": iter}[tag](items)
            except TypeError:
                abort("the candidate sent an unhashable set element")
        if tag == "d" and isinstance(payload, list):
            pairs = [decode(["t", pair], depth + 1) if isinstance(pair, list) else None for pair in payload]
            if any(pair is None or len(pair) != 2 for pair in pairs):
                abort("the candidate's reply is not well-formed data")
            try:
                return dict(pairs)
            except TypeError:
                abort("the candidate sent an unhashable dict key")
        if tag == "T" and payload in builtin_types:
            return builtin_types[payload]
        if tag == "r" and type(payload) is int:
            return refs.setdefault(payload, Ref(payload))
        abort("the candidate's reply is not well-formed data")

    def reraised(name, message):
        """A fresh exception of the builtin class the candidate named (never an object of the candidate's)."""
        cls = vars(builtins).get(name)
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            cls = Exception
        if not issubclass(cls, Exception):  # SystemExit, KeyboardInterrupt, GeneratorExit: never a test outcome
            abort(f"the candidate raised {name}")
        if issubclass(cls, (StopIteration, StopAsyncIteration)):  # raised in the test, it would end the test's own
            abort(f"the candidate raised {name}")  # loop: all(map(...)) and zip(...) would see no item at all
        for base in cls.__mro__:
            try:
                err = base(message)
                break
            except Exception:
                continue
        state["raised"] = err
        return err

    def outcome(reply):
        if "value" in reply:
            return decode(reply["value"])
        if "raise" in reply and isinstance(reply["raise"], list) and len(reply["raise"]) == 2:
            name, message = reply["raise"]
            raise reraised(str(name), str(message)[:300])
        if "unserialisable" in reply:
            abort(f"returned a value that is not plain data ({str(reply['unserialisable'])[:60]})")
        abort("the candidate's reply is not well-formed data")

    def remote(**message):
        """Send one request; serve the test's callbacks the candidate makes meanwhile; return its answer."""
        if state["abort"] is not None:
            raise Abort(state["abort"])
        send(message)
        while True:
            reply = receive()
            state["answered"] = True
            if "callback" not in reply:
                return outcome(reply)
            send(callback(reply))

    def callback(reply):
        index = reply.get("callback")
        if type(index) is not int or not 0 <= index < len(callbacks):
            abort("the candidate called back something it was not given")
        args, kwargs = decode(reply.get("args")), decode(reply.get("kwargs"))
        if type(args) is not list or type(kwargs) is not dict or any(type(k) is not str for k in kwargs):
            abort("the candidate's reply is not well-formed data")
        try:
            return {"value": encode(callbacks[index](*args, **kwargs))}
        except Exception as err:
            name = next(c.__name__ for c in type(err).__mro__ if vars(builtins).get(c.__name__) is c)
            return {"raise": [name, str(err)[:300]]}

    def call(target, args, kwargs):
        return remote(op="call", target=target, args=encode(list(args)), kwargs=encode(kwargs))

    class Function:
        """A function (or class) of the candidate's module."""

        __slots__ = ("_name",)

        def __init__(self, name):
            object.__setattr__(self, "_name", name)

        def __call__(self, *args, **kwargs):
            return call(self._name, args, kwargs)

        def __repr__(self):
            return f"<candidate function {self._name}>"

    class Class(Function):
        """A class of the candidate's module: what calling it makes stays in the candidate's process."""

        __slots__ = ()

    class Ref:
        """An object in the candidate's process: pass it back, read or set its attributes, call it, ask its
        truth value (each answered with plain data), or compare it by identity; nothing of it runs here."""

        __slots__ = ("_id",)

        def __init__(self, handle):
            object.__setattr__(self, "_id", handle)

        def __getattr__(self, name):
            return remote(op="getattr", target=object.__getattribute__(self, "_id"), name=name)

        def __setattr__(self, name, value):
            remote(op="setattr", target=object.__getattribute__(self, "_id"), name=name, value=encode(value))

        def __call__(self, *args, **kwargs):
            return call(object.__getattribute__(self, "_id"), args, kwargs)

        def __bool__(self):
            return remote(op="bool", target=object.__getattribute__(self, "_id")) is True

        def __repr__(self):
            return f"<candidate object #{object.__getattribute__(self, '_id')}>"

    def bind(namespace, names):
        for name, description in names.items():
            kind = description[0] if isinstance(description, list) and description else None
            if kind == "function":
                namespace[name] = Function(name)
            elif kind == "class":
                namespace[name] = Class(name)
            elif kind in ("module", "stdlib") and isinstance(description[-1], str):
                module = imported(description[-1])
                if module is not None and kind == "stdlib":
                    module = getattr(module, name, None)
                if module is not None:
                    namespace[name] = module
                    if kind == "module":
                        modules_named[id(module)] = name
            elif kind == "value" and len(description) == 2:
                namespace[name] = decode(description[1])

    def imported(module):
        """The checker's own import of a stdlib module the candidate's module names (never the candidate's)."""
        if module.split(".")[0] not in sys.stdlib_module_names:
            return None
        try:
            return __import__("importlib").import_module(module)
        except Exception:
            return None

    # ------------------------------------------------------------------ the test

    def run(code, filename, namespace):
        exec(compile(code, filename, "exec"), namespace)

    def where(err):
        line = None
        trace = err.__traceback__
        while trace is not None:
            if trace.tb_frame.f_code.co_filename == "test.py":
                line = trace.tb_lineno
            trace = trace.tb_next
        return f" (line {line} of the test)" if line else ""

    if dumpable != 0:
        verdict("checker_error", "prctl(PR_SET_DUMPABLE, 0) failed")
    prelude = {"__name__": "__main__", "__builtins__": builtins}
    try:  # the task's own text, in a namespace the candidate never reached: its failure is the task's
        run(request["prelude"], "prelude.py", prelude)
    except Exception as err:
        verdict("task_error", f"the task's own code raised {type(err).__name__}: {err}")
    try:
        channel_out, channel_in = start()
    except OSError as err:
        verdict("checker_error", f"starting the candidate's process: {err}")
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        send({"program": request["program"], "names": list(request["names"])})
        hello = receive()
        if "load_error" in hello:
            abort(f"loading the program raised {str(hello['load_error'])[:200]}")
        if not isinstance(hello.get("names"), dict):
            abort("the candidate's reply is not well-formed data")
        entry = request["candidate"]
        if entry and hello["names"].get(entry) not in (["function"], ["class"]):
            abort(f"the program defines no function {entry}")
        # Only the names the host asked for: a name the candidate adds to its reply (range, all, len) would put a
        # proxy of its own, or a module, where the test reads a builtin.
        bind(namespace, {name: hello["names"][name] for name in request["names"] if name in hello["names"]})
        namespace.update(prelude)
        if entry:
            namespace["candidate"] = namespace[entry] = Function(entry)
        run(request["setup"], "setup.py", namespace)
        run(request["test"], "test.py", namespace)
    except Abort:
        pass
    except Unsupported as err:  # a value of the test's own that cannot cross: masked, unless it came after
        if not state["answered"]:  # an answer of the candidate's (then it may be the candidate's doing)
            verdict("unsupported", str(err))
        verdict("test_error", f"the test could not pass a value to the candidate: {err}")
    except AssertionError as err:
        if state["abort"] is None and err is not state["raised"]:
            verdict("assertion", "an assert of the test failed" + where(err))
        if state["abort"] is None:
            verdict("raised", f"{type(err).__name__}: {err}")
    except BaseException as err:  # every other way the test can end is judged here
        if state["abort"] is None:
            if err is state["raised"]:
                verdict("raised", f"{type(err).__name__}: {err}")
            verdict("test_error", f"the test raised {type(err).__name__} on the candidate's values" + where(err))
    if state["abort"] is not None:
        verdict("aborted", state["abort"])
    verdict("passed")


if __name__ == "__main__":
    _main()
