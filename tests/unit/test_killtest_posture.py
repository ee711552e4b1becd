"""Posture normalisation and drift, and the hardened facts the checked-in expected posture must encode."""

from __future__ import annotations

from sandbox.killtest import posture

RAW = {
    "namespaces": {"mnt": "mnt:[1]", "user": "user:[9]"},
    "mounts": {
        "/": {"source": "overlay", "type": "overlay", "options": ["ro", "relatime", "lowerdir=/var/lib/docker/x"]},
        "/etc/hosts": {"source": "/dev/vda", "type": "ext4", "options": ["ro", "relatime", "discard"]},
        "/workspace": {
            "source": "tmpfs",
            "type": "tmpfs",
            "options": ["rw", "nosuid", "nodev", "size=262144k", "uid=1000"],
        },
    },
    "seccomp": "2",
}


def test_normalise_keeps_security_facts_and_drops_machine_details():
    result = posture.normalise(RAW, {"mnt": "mnt:[2]", "user": "user:[9]"})
    assert result["namespaces"] == {"mnt": "private", "user": "host"}
    assert result["mounts"]["/"] == {"type": "overlay", "options": ["ro"]}
    assert result["mounts"]["/etc/hosts"] == {"type": "host-bind", "options": ["ro"]}
    assert result["mounts"]["/workspace"]["options"] == ["rw", "nosuid", "nodev", "size=262144k", "uid=1000"]


def test_drift_names_changed_missing_and_new_keys():
    expected = posture.normalise(RAW, {})
    assert posture.drift(expected, expected) == []
    observed = posture.normalise(
        {**RAW, "seccomp": "0", "mounts": {**RAW["mounts"], "/": {**RAW["mounts"]["/"], "options": ["rw"]}}}, {}
    )
    observed["network"] = {"interfaces": ["eth0", "lo"]}
    del observed["namespaces"]["user"]
    keys = {d["key"]: d for d in posture.drift(expected, observed)}
    assert set(keys) == {"seccomp", "mounts./.options", "network.interfaces", "namespaces.user"}
    assert keys["seccomp"]["expected"] == "2" and keys["seccomp"]["observed"] == "0"
    assert keys["network.interfaces"]["expected"] == "<absent>"


def test_checked_in_posture_is_the_hardened_one():
    expected = posture.load()
    assert expected["identity"]["uid"] == 1000 and expected["identity"]["groups"] == []
    assert set(expected["capabilities"].values()) == {"0000000000000000"}
    assert expected["no_new_privs"] == "1" and expected["seccomp"] == "2"
    assert expected["runner"]["capabilities"]["CapBnd"] == "0000000000000000"
    assert expected["runner"]["capabilities"]["CapEff"] == "00000000000001e0"  # KILL, SETGID, SETUID, SETPCAP
    assert expected["network"] == {"interfaces": ["lo"], "ipv4_default_route": False, "ipv6_default_route": False}
    assert expected["mounts"]["/"]["options"] == ["ro"]
    assert {"nosuid", "nodev"} <= set(expected["mounts"]["/workspace"]["options"])
    # the fork server: root with the runner's four capabilities and nothing to regain (it forks, never runs code)
    assert expected["fork_server"]["capabilities"] == expected["runner"]["capabilities"]
    assert expected["fork_server"]["groups"] == [] and expected["fork_server"]["no_new_privs"] == "1"
    assert expected["fds"] == [0, 1, 2] and expected["processes"] == ["docker-init", "python3", "python3"]
    assert expected["rlimits"]["core"] == [0, 0] and expected["cgroup"]["pids"] == "128"
    assert all(expected["namespaces"][ns] == "private" for ns in ("mnt", "net", "pid", "ipc", "uts"))
    assert "/var/run/docker.sock" not in expected["mounts"]
