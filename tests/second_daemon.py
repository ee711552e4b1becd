"""A second Docker daemon owned by the test, reachable over TLS ``tcp://127.0.0.1:PORT`` and a unix socket.

Everything lives under one temporary directory: its own ``--data-root``, ``--exec-root``, ``--pidfile``,
unix socket and containerd (dockerd would reuse a system containerd at /run/containerd where one runs).
The shared daemon is only read: ``docker save`` of the runner image, piped into this daemon's ``load``.

Networking: dockerd runs in a network namespace of its own, with no bridge and no iptables rules: a
dockerd started with ``--bridge none`` deletes the host's ``docker0`` (the shared daemon's bridge). Its
TCP listener must still be on the host's loopback, so the test binds ``127.0.0.1:0`` here and hands
the listening socket to dockerd by socket activation (``-H fd://``, ``LISTEN_FDS``/``LISTEN_PID``);
dockerd wraps activated sockets in TLS (``--tlsverify``) as it does its own TCP listeners.

The certificates are generated here (the ``cryptography`` package, else the ``openssl`` CLI): a CA, a server certificate for
127.0.0.1/localhost, a client certificate, and a second CA with a client certificate of its own for
the tests that must be refused. ``SecondDaemon.tls_config`` gives the ``sandbox.engine`` keys that reach it.

Use: the session fixture ``second_tls_daemon`` of tests/integration/conftest.py (one daemon for every module
that asks; a test that stops it starts it again, or the next test's fixture does).
It skips with the reason when no daemon can be started here (not root, a binary missing); in CI that
is a failure. ``stop`` (any signal) then ``start`` restarts dockerd on the same listener and certificates.
Teardown restarts a killed dockerd (its containers outlive it), stops the daemon and its containerd,
removes anything still in its runc root, kills its shims, unmounts what is under its directory and
removes the directory.
"""

from __future__ import annotations

import datetime
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from images.inputs import runner_image
from sandbox.labels import Labels

IN_CI = os.environ.get("CI", "").lower() == "true"
BINARIES = ("dockerd", "containerd", "containerd-shim-runc-v2", "runc", "docker", "unshare", "bash")


def unusable() -> str | None:
    """Why no second daemon can run here, or None."""
    if os.geteuid() != 0:
        return "a second Docker daemon needs root"
    missing = [name for name in BINARIES if shutil.which(name) is None]
    if missing:
        return f"not installed: {', '.join(missing)}"
    if importlib.util.find_spec("cryptography") is None and shutil.which("openssl") is None:
        return "neither the cryptography package nor the openssl CLI is installed (the daemon's certificates)"
    return None


# ---------------------------------------------------------------- certificates


def _write_key(path: Path, key) -> None:
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _issue(path: Path, subject: str, key, issuer: tuple | None, *, usage=None, ips=(), names=()) -> tuple:
    """Write a PEM certificate for ``key``, self-signed when ``issuer`` is None (a CA); returns (cert, key)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_cert, issuer_key = issuer if issuer else (None, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_cert.subject if issuer_cert else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    )
    if issuer is None:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        ).add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    sans = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips] + [x509.DNSName(n) for n in names]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(issuer_key, hashes.SHA256())
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def make_certificates(directory: Path, backend: str | None = None) -> None:
    """ca.pem; server-cert.pem/-key.pem (127.0.0.1, localhost); cert.pem/key.pem (a client of ca.pem);
    other-ca.pem and other-cert.pem/-key.pem (a CA the daemon does not trust, and its client).

    ``backend``: "cryptography" (the default where the package is installed; it is not a dependency of the
    project) or "openssl" (the CLI)."""
    backend = backend or ("cryptography" if importlib.util.find_spec("cryptography") else "openssl")
    directory.mkdir(parents=True)
    (_with_cryptography if backend == "cryptography" else _with_openssl)(directory)


def _with_cryptography(directory: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    def key(name: str):
        private = ec.generate_private_key(ec.SECP256R1())
        _write_key(directory / name, private)
        return private

    ca = _issue(directory / "ca.pem", "gym test CA", key("ca-key.pem"), None)
    client_usage = ExtendedKeyUsageOID.CLIENT_AUTH
    _issue(
        directory / "server-cert.pem",
        "gym second daemon",
        key("server-key.pem"),
        ca,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        ips=("127.0.0.1",),
        names=("localhost",),
    )
    _issue(directory / "cert.pem", "gym test client", key("key.pem"), ca, usage=client_usage)
    other = _issue(directory / "other-ca.pem", "a CA nobody trusts", key("other-ca-key.pem"), None)
    _issue(directory / "other-cert.pem", "an untrusted client", key("other-key.pem"), other, usage=client_usage)


def _with_openssl(directory: Path) -> None:
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)

    ec_key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")

    def ca(name: str, subject: str) -> None:
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{name}-key.pem")
        openssl(
            "req", "-x509", "-key", f"{name}-key.pem", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={subject}",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip

    def leaf(cert: str, key: str, subject: str, issuer: str, extensions: str) -> None:
        (directory / f"{cert}.ext").write_text(
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
            f"subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n{extensions}\n"
        )
        openssl("req", "-new", *ec_key, "-keyout", key, "-out", f"{cert}.csr", "-subj", f"/CN={subject}")
        openssl(
            "x509", "-req", "-in", f"{cert}.csr", "-CA", f"{issuer}.pem", "-CAkey", f"{issuer}-key.pem",
            "-CAcreateserial", "-out", f"{cert}.pem", "-days", "2", "-extfile", f"{cert}.ext",
        )  # fmt: skip

    ca("ca", "gym test CA")
    leaf("server-cert", "server-key.pem", "gym second daemon", "ca", "extendedKeyUsage=serverAuth\n"
         "subjectAltName=IP:127.0.0.1,DNS:localhost")  # fmt: skip
    leaf("cert", "key.pem", "gym test client", "ca", "extendedKeyUsage=clientAuth")
    ca("other-ca", "a CA nobody trusts")
    leaf("other-cert", "other-key.pem", "an untrusted client", "other-ca", "extendedKeyUsage=clientAuth")
    for key in directory.glob("*key.pem"):
        key.chmod(0o600)


# ---------------------------------------------------------------- the daemon


class SecondDaemon:
    """A dockerd + containerd pair living entirely under ``root``; API on a unix socket and TLS TCP."""

    def __init__(self, root: Path):
        self.root = root
        self.url = f"unix://{root}/docker.sock"
        self.exec_root = root / "exec"
        self.certs = root / "tls"
        self.listener: socket.socket | None = None
        self.dockerd: subprocess.Popen | None = None
        self.containerd: subprocess.Popen | None = None

    @property
    def tls_url(self) -> str:
        assert self.listener is not None, "start() first"
        return f"tcp://127.0.0.1:{self.listener.getsockname()[1]}"

    def tls_config(self, *, ca: str = "ca.pem", cert: str | None = "cert.pem", key: str | None = "key.pem") -> dict:
        """``sandbox.engine`` keys that reach this daemon over TLS (file names under ``certs``)."""
        tls = {"ca": str(self.certs / ca)}
        if cert is not None:
            tls.update(cert=str(self.certs / cert), key=str(self.certs / key))
        return {"base_url": self.tls_url, "tls": tls}

    @property
    def containerd_socket(self) -> str:
        return str(self.root / "containerd" / "containerd.sock")

    def start_containerd(self) -> None:
        state = self.root / "containerd"
        state.mkdir(parents=True)
        config = state / "config.toml"
        config.write_text(
            "version = 2\n"
            f'root = "{state}/root"\nstate = "{state}/state"\n'
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
            f'[grpc]\n  address = "{self.containerd_socket}"\n'
            f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{state}/opt"\n'
        )
        self.containerd = self._spawn(["containerd", "--config", str(config), "--log-level", "warn"], "containerd.log")
        self._wait(lambda: Path(self.containerd_socket).exists(), self.containerd, "containerd", 30)

    def start(self, timeout: float = 60) -> float:
        """Start dockerd (certificates and the TCP listener made on the first start); seconds until it answered."""
        assert self.dockerd is None or self.dockerd.poll() is not None, "dockerd is already running"
        started = time.monotonic()
        if not self.certs.exists():
            make_certificates(self.certs)
        if self.listener is None:
            self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.listener.bind(("127.0.0.1", 0))
            self.listener.listen(64)
        (self.root / "daemon.json").write_text("{}\n")  # not /etc/docker/daemon.json
        fd = self.listener.fileno()
        dockerd = [
            "unshare",
            "--net",
            "dockerd",
            "--host",
            self.url,
            "--host",
            "fd://",
            "--tlsverify",
            "--tlscacert",
            str(self.certs / "ca.pem"),
            "--tlscert",
            str(self.certs / "server-cert.pem"),
            "--tlskey",
            str(self.certs / "server-key.pem"),
            "--data-root",
            str(self.root / "data"),
            "--exec-root",
            str(self.exec_root),
            "--pidfile",
            str(self.root / "dockerd.pid"),
            "--containerd",
            self.containerd_socket,
            "--config-file",
            str(self.root / "daemon.json"),
            "--bridge",
            "none",
            "--iptables=false",
            "--ip-masq=false",
            "--userland-proxy=false",
            "--log-level",
            "warn",
        ]
        # Socket activation: the listener becomes fd 3 and LISTEN_PID names dockerd itself (bash and unshare
        # exec in place, so the shell's pid is dockerd's).
        moved = "" if fd == 3 else f" 3<&{fd} {fd}<&-"
        wrapper = f'export LISTEN_PID=$$ LISTEN_FDS=1; exec "$@"{moved}'
        self.dockerd = self._spawn(["bash", "-c", wrapper, "bash", *dockerd], "dockerd.log", pass_fds=(fd,))
        self._wait(self.answers, self.dockerd, "dockerd", timeout)
        return time.monotonic() - started

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> float:
        """Signal dockerd and reap it (a zombie's pid in the pid file would refuse the next start)."""
        started = time.monotonic()
        if self.dockerd is not None and self.dockerd.poll() is None:
            self.dockerd.send_signal(sig)
            try:
                self.dockerd.wait(timeout)
            except subprocess.TimeoutExpired:
                self.dockerd.kill()
                self.dockerd.wait(30)
        return time.monotonic() - started

    def answers(self) -> bool:
        try:
            client = self.client(timeout=5)
        except docker.errors.DockerException:
            return False
        try:
            return bool(client.ping())
        except Exception:  # noqa: BLE001 - not up yet, whatever the reason
            return False
        finally:
            client.close()

    def client(self, timeout: int = 60) -> docker.DockerClient:
        """A client over the unix socket (the test's own view, independent of the TLS under test)."""
        return docker.DockerClient(base_url=self.url, version="1.41", timeout=timeout)

    def gym_containers(self) -> list[dict]:
        client = self.client()
        try:
            return client.api.containers(all=True, filters={"label": Labels.MARK})
        finally:
            client.close()

    def busy_containers(self) -> list[str]:
        """Ids of this daemon's running gym containers that run more than their init, runner and fork server: a
        tool call or a grading in flight (a warm container, a reset one waiting to serve again and one being removed
        run those three or fewer)."""
        client = self.client()
        try:
            busy = []
            for container in client.api.containers(filters={"label": Labels.MARK, "status": "running"}):
                try:
                    processes = client.api.top(container["Id"])["Processes"] or []
                except docker.errors.APIError:  # gone meanwhile
                    continue
                if len(processes) > 3:
                    busy.append(container["Id"])
            return busy
        finally:
            client.close()

    def load(self, image: str) -> float:
        """``docker save`` from the shared daemon (a read) piped into this one."""
        started = time.monotonic()
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        load = subprocess.run(
            ["docker", "-H", self.url, "load", "-q"], stdin=save.stdout, capture_output=True, text=True, timeout=300
        )
        save.stdout.close()
        if save.wait(60) != 0 or load.returncode != 0:
            raise RuntimeError(f"could not copy {image} into the second daemon: {load.stderr.strip()}")
        return time.monotonic() - started

    def _spawn(self, argv: list[str], log_name: str, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
        with open(self.root / log_name, "ab") as log:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=pass_fds,
            )

    def _wait(self, ready, proc: subprocess.Popen, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.root / f"{name}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name} did not come up (exit {proc.poll()}):\n{tail}")
            time.sleep(0.2)

    # ---------------------------------------------------------------- teardown

    def teardown(self) -> None:
        """Leave nothing: containers, daemons, shims, mounts, files; each step mops up what the one before missed."""
        try:
            if (
                self.dockerd is not None
                and self.dockerd.poll() is not None
                and self.containerd is not None
                and self.containerd.poll() is None
            ):
                self.start(timeout=30)  # a killed daemon's containers still run: let a new one shut them down
            if self.dockerd is not None and self.dockerd.poll() is None:
                client = self.client()
                try:
                    for container in client.api.containers(all=True, quiet=True):
                        client.api.remove_container(container["Id"], force=True, v=True)
                finally:
                    client.close()
        except Exception:  # noqa: BLE001 - the steps below do it the hard way
            pass
        self.stop(signal.SIGTERM, timeout=60)
        if self.listener is not None:
            self.listener.close()
        self._runc_delete_all()
        if self.containerd is not None and self.containerd.poll() is None:
            self.containerd.terminate()
            try:
                self.containerd.wait(30)
            except subprocess.TimeoutExpired:
                self.containerd.kill()
                self.containerd.wait(30)
        self._kill_processes_naming_root()
        self._unmount_all()
        shutil.rmtree(self.root, ignore_errors=True)

    def _runc_delete_all(self) -> None:
        runc_root = self.exec_root / "runtime-runc" / "moby"
        if not runc_root.is_dir():
            return
        for state in runc_root.iterdir():
            subprocess.run(
                ["runc", "--root", str(runc_root), "delete", "--force", state.name], capture_output=True, timeout=30
            )

    def _kill_processes_naming_root(self) -> None:
        """Shims (started by this containerd, ``-address`` under root) and anything else left of ours."""
        mark = str(self.root).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if mark in cmdline:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def _unmount_all(self) -> None:
        prefix = str(self.root)
        points = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].encode().decode("unicode_escape")  # octal escapes such as \040
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
        for point in sorted(points, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)


def started_daemon(root: Path | None = None, image: str | None = None) -> SecondDaemon:
    """Start a second daemon with the runner image loaded (the caller calls ``teardown``, even on failure)."""
    daemon = SecondDaemon(root or Path(tempfile.mkdtemp(prefix="gymtls-", dir="/tmp")))
    try:
        daemon.start_containerd()
        up_s = daemon.start()
        load_s = daemon.load(image or runner_image())
    except BaseException:
        daemon.teardown()
        raise
    print(f"\nsecond daemon (TLS {daemon.tls_url}) up in {up_s:.1f}s, runner image loaded in {load_s:.1f}s")
    return daemon


def lasting_links() -> set[str]:
    """The host's network links but containers' veth ends, which come and go with containers of other
    suites sharing the daemon."""
    return {name for name in os.listdir("/sys/class/net") if not name.startswith("veth")}


def provide_second_daemon() -> Iterator[SecondDaemon]:
    """A second daemon with the runner image, over TLS; stopped and removed afterwards, and then the host's
    network links (the shared daemon's ``docker0`` among them) must all be there still. The body of the
    session fixture ``second_tls_daemon`` (tests/integration/conftest.py): one daemon for every module."""
    reason = unusable()
    if reason:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    links = lasting_links()
    daemon = started_daemon()
    try:
        yield daemon
    finally:
        daemon.teardown()
    assert not daemon.root.exists(), f"{daemon.root} is left behind"
    gone = links - lasting_links() - removed_with_their_network(links)
    assert not gone, f"the second daemon removed host network links {sorted(gone)} (the shared daemon's bridge)"


def removed_with_their_network(links: set[str]) -> set[str]:
    """The bridges ``br-ID`` of the shared daemon's user-defined networks that are gone from it: the suite that made
    the network (docker-compose's ``NAME_default``, here or in another suite on the daemon) removed it, and its
    bridge with it. A bridge whose network the shared daemon still has was not removed by its own daemon."""
    networks = {network.id[:12] for network in docker.from_env().networks.list()}
    return {name for name in links if name.startswith("br-") and name[3:] not in networks}


@pytest.fixture(scope="module")
def second_tls_daemon() -> Iterator[SecondDaemon]:
    """A module's own second daemon (modules under tests/integration share the session's, from its conftest)."""
    yield from provide_second_daemon()
