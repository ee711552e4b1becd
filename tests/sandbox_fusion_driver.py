"""Run inside a venv holding SandboxFusion's official client, ``sandbox-fusion`` (tests/integration/
test_sandbox_serve_client.py): the client calls a real `gym sandbox-serve`, and this prints what it got back as one
JSON object.

``python -m tests.sandbox_fusion_driver URL``. Every call goes through the client's own ``run_code`` (requests) or
``run_code_async`` (aiohttp), and its own ``summary_run_code_result``: the response must parse as its
``RunCodeResponse``, and a refusal must reach its caller as the client reports one.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys


def main() -> None:
    import sandbox_fusion
    from sandbox_fusion import RunCodeRequest, RunCodeResponse, SummaryMapping, run_code, summary_run_code_result

    sandbox_fusion.set_endpoint(sys.argv[1])
    mapping = SummaryMapping(Success="pass", Failed="fail", RunTimeout="timeout", RunFailed="crash")
    cases = {
        "stdout": RunCodeRequest(code="print('hello')", language="python"),
        "stdin": RunCodeRequest(code="print(input()[::-1])", stdin="abc\n", language="python"),
        "timeout": RunCodeRequest(code="while True:\n    pass", language="python", run_timeout=1),
        "exit": RunCodeRequest(code="import sys\nprint('partial')\nsys.exit(3)", language="python"),
        "files": RunCodeRequest(
            code="n = int(open('data/in.txt').read())\nopen('out.txt', 'w').write(str(n * 2))\nprint(n)",
            language="python",
            files={"data/in.txt": base64.b64encode(b"21").decode()},
            fetch_files=["out.txt", "not-written.txt"],
        ),
        "bash": RunCodeRequest(code='read x; echo "got $x"; exit 4', stdin="7\n", language="bash"),
    }
    out: dict = {"client": __import__("importlib.metadata").metadata.version("sandbox-fusion")}
    for name, request in cases.items():
        response = run_code(request, max_attempts=1, client_timeout=60)
        assert isinstance(response, RunCodeResponse)
        out[name] = {
            "status": response.status.value,
            "run_status": response.run_result.status.value,
            "return_code": response.run_result.return_code,
            "stdout": response.run_result.stdout,
            "execution_time": response.run_result.execution_time,
            "files": {k: base64.b64decode(v).decode() for k, v in response.files.items()},
            "summary": summary_run_code_result(response, mapping),
        }
    request = RunCodeRequest(code="import sys\nprint(sum(map(int, sys.stdin.read().split())))", stdin="1 2 3",
                             language="python")  # fmt: skip
    response = asyncio.run(sandbox_fusion.run_code_async(request, max_attempts=1, client_timeout=60))
    out["async"] = {"status": response.status.value, "stdout": response.run_result.stdout}
    for name, request in {
        "traversal": RunCodeRequest(code="print(1)", language="python", files={"../escape.txt": "eA=="}),
        "absolute": RunCodeRequest(code="print(1)", language="python", fetch_files=["/etc/passwd"]),
        "language": RunCodeRequest(code="int main(){}", language="cpp"),
    }.items():
        try:
            run_code(request, max_attempts=1, client_timeout=60)
            out[name] = "answered"
        except Exception as exc:  # the client raises for any answer but a 200 that is not SandboxError
            out[name] = str(exc)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
