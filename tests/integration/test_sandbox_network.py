"""A workspace's network, with networking disabled (sandbox.docker_engine.HOSTS_LABEL): the runner image and every
image built FROM it start their containers without a libnetwork sandbox, in a network namespace of their own that
holds only an up loopback.

Attacks, judged on the host: a connection to a listener on the Docker bridge gateway (the one destination the
host really offers) and to an outside address gets nowhere, and the listener saw nobody; the container's network
namespace is not the host's, and no file of the host is bound into it for the network (no /etc/hosts,
/etc/resolv.conf or /etc/hostname of Docker's). Honest controls: localhost and the hostname resolve and a server on
the loopback answers its client, in the same workspace. An image without the label keeps network mode none with
Docker's /etc/hosts (localhost resolves there too).
"""

from __future__ import annotations

import json
import os
import subprocess

import docker
import pytest
import trio

from sandbox.docker_engine import HOSTS_LABEL
from sandbox.failure import FailureKind
from sandbox.killtest.listener import gateway_listener
from sandbox.pool import WorkspacePool
from sandbox.protocol import ExecRequest
from tests.sandbox_support import small_config

pytestmark = pytest.mark.docker

PROBE = r"""
import json, os, socket, sys
out = {"interfaces": sorted(os.listdir("/sys/class/net")), "hostname": socket.gethostname()}
out["localhost"] = sorted({a[4][0] for a in socket.getaddrinfo("localhost", 80, proto=socket.IPPROTO_TCP)})
out["own_name"] = sorted({a[4][0] for a in socket.getaddrinfo(socket.gethostname(), 80, proto=socket.IPPROTO_TCP)})
server = socket.create_server(("localhost", 0))
client = socket.create_connection(("localhost", server.getsockname()[1]), timeout=5)
conn, _ = server.accept()
client.sendall(b"ping")
out["loopback"] = conn.recv(4).decode()
for name, host, port in (("gateway", sys.argv[1], int(sys.argv[2])), ("outside", "1.1.1.1", 80)):
    try:
        socket.create_connection((host, port), timeout=3).sendall(b"escaped\n")
        out[name] = "connected"
    except OSError as exc:
        out[name] = exc.__class__.__name__ + ": " + str(exc.strerror or exc)
print(json.dumps(out))
"""


def probe(config=None) -> tuple[dict, dict, dict[str, list[str]]]:
    """The probe's report from inside a fresh workspace, the container's inspect, and what the gateway saw."""

    async def main():
        async with WorkspacePool(config or small_config()) as pool:
            async with gateway_listener(pool.engine) as listener, pool.acquire("pytest-network") as ws:
                result = await ws.exec(ExecRequest(argv=["python3", "-c", PROBE, listener.host, str(listener.port)]))
                inspected = pool.engine.client.api.inspect_container(ws.id)
                inspected["net_namespace"] = os.readlink(f"/proc/{inspected['State']['Pid']}/ns/net")  # while it runs
                await trio.sleep(0.2)  # a connection that did land has its first line read by now
                return result, inspected, dict(listener.seen)

    result, inspected, seen = trio.run(main)
    assert result.failure == FailureKind.OK and result.exit_code == 0, result
    return json.loads(result.stdout_text), inspected, seen


def test_a_workspace_reaches_nothing_but_its_own_loopback_and_localhost_resolves():
    report, inspected, seen = probe()
    assert inspected["Config"]["NetworkDisabled"] is True  # the runner image carries the label
    assert report["interfaces"] == ["lo"]
    assert report["gateway"] != "connected" and report["outside"] != "connected", report
    assert "Network is unreachable" in report["gateway"] and "Network is unreachable" in report["outside"]
    assert seen == {}  # host-side: the gateway's listener was never contacted
    # honest work: localhost, the hostname, a loopback server and its client
    assert report["hostname"] == "workspace" and "127.0.0.1" in report["localhost"] and report["own_name"]
    assert report["loopback"] == "ping"
    # no host file is bound in for the network, and the namespace is the container's own
    assert inspected["HostsPath"] == "" and inspected["ResolvConfPath"] == ""
    assert not [m for m in inspected["Mounts"] if m["Destination"].startswith("/etc/")]
    assert inspected["net_namespace"] != os.readlink("/proc/self/ns/net")


@pytest.fixture(scope="module")
def unlabelled_image():
    """The runner image with the label emptied: an image that does not say it resolves localhost alone."""
    client = docker.from_env()
    base = small_config().image
    tag = "gym-test-unlabelled:" + base.rsplit(":", 1)[1]
    dockerfile = f'FROM {base}\nLABEL {HOSTS_LABEL}=""\n'
    subprocess.run(["docker", "build", "-q", "-t", tag, "-"], input=dockerfile, text=True, check=True, timeout=300)
    yield tag
    client.images.remove(tag, force=True)
    client.close()


def test_an_image_without_the_label_keeps_network_none_and_dockers_hosts(unlabelled_image):
    report, inspected, seen = probe(small_config(image=unlabelled_image))
    assert inspected["Config"].get("NetworkDisabled") in (None, False)
    assert inspected["HostConfig"]["NetworkMode"] == "none" and inspected["HostsPath"]
    assert report["interfaces"] == ["lo"] and seen == {}
    assert inspected["net_namespace"] != os.readlink("/proc/self/ns/net")
    assert "Network is unreachable" in report["gateway"] and "Network is unreachable" in report["outside"]
    assert "127.0.0.1" in report["localhost"] and report["loopback"] == "ping"
