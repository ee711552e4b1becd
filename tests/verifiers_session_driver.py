"""A verifiers rollout's workspace tools called directly (`gym.integrations.verifiers_workspace.WorkspaceSession`),
run by the verifiers venv's python (tests/integration/test_integrations_verifiers.py): one honest call, calls whose
arguments leave the workspace or are huge, then calls after the rollout ended; prints each observation as JSON."""

from __future__ import annotations

import json

from gym.integrations.verifiers_workspace import WorkspaceSession, observation
from gym.tools import ToolsConfig
from sandbox.config import SandboxConfig
from sandbox.labels import current_owner


def main() -> None:
    session = WorkspaceSession(SandboxConfig(), ToolsConfig(output_chars=4096), owner="verifiers-rollout")
    seen = {
        "honest": session.call("bash", {"command": "echo hi > out.txt && cat out.txt"}),
        "outside": session.call("write_file", {"path": "../../tmp/planted", "content": "x"}),
        "cwd": session.call("bash", {"command": "pwd", "cwd": "/"}),
        "huge": session.call("write_file", {"path": "big.txt", "content": "x" * (8 << 20)}),
        "not a string": session.call("bash", {"command": 5}),
    }
    session.close()
    seen["after the end"] = session.call("bash", {"command": "echo again"})
    seen["after the end, twice"] = session.call("read_file", {"path": "out.txt"})
    shown = {name: observation(outcome)[:300] for name, outcome in seen.items()}
    print(json.dumps(shown | {"owner": current_owner()}))


if __name__ == "__main__":
    main()
