"""TLS for real: a CA made here with openssl, a private PostgreSQL cluster that takes
``hostssl`` connections only (the application's role by password and client certificate,
the certificate's key encrypted), and a private RabbitMQ node that listens for
``amqps://`` only. Enqueue, a worker woken over amqps, the cleaner, the CLI and the
dashboard all work over both at once; a wrong CA is one clear line; no password, key
passphrase or key ever shows in any output."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import time
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pika
import psycopg
import pytest

import txqueue
from txqueue import Task, redaction
from txqueue.outbox import client

from ..partition import RABBITMQ
from .cluster import AS, Server, cluster
from .helpers import free_port, http_get, wait_until
from .rabbit import Node, await_node, folder_of
from .test_cli import ROOT, TXQUEUE, cli, one_line_error
from .tls import Authority, Pair, rabbit_node

pytestmark = pytest.mark.xdist_group("test_tls")

APP = "tests.integration.apps:registry"
PG_PASSWORD = "pg-" + secrets.token_hex(8)
MQ_PASSWORD = "mq-" + secrets.token_hex(8)
KEY_PASSPHRASE = "key-" + secrets.token_hex(8)

HBA = """\
local     all  all                   trust
hostssl   all  postgres  127.0.0.1/32  trust
hostssl   all  app       127.0.0.1/32  scram-sha-256  clientcert=verify-full
hostssl   all  web       127.0.0.1/32  scram-sha-256
hostnossl all  all       127.0.0.1/32  reject
"""


@dataclass(frozen=True)
class Tls:
    ca: Path
    wrong_ca: Path
    client: Pair  # CN=app, its key encrypted with KEY_PASSPHRASE
    pg: Server
    node: Node
    keys: tuple[Path, ...]  # every private key made, whose content must never show
    init: str = ""  # what `txqueue init` over both printed as the module began

    def db(self, ca: Path | None = None, sslmode: str = "verify-full") -> str:
        """The application's URL: password, server verified against ``ca``, and a client
        certificate whose key needs its passphrase."""
        return (
            f"postgresql://app:{PG_PASSWORD}@127.0.0.1:{self.pg.port}/app"
            f"?sslmode={sslmode}&sslrootcert={ca or self.ca}"
            f"&sslcert={self.client.cert}&sslkey={self.client.key}&sslpassword={KEY_PASSPHRASE}"
        )

    @property
    def admin(self) -> str:
        """The superuser's URL, trusted over TLS (hostssl): for the test's own statements."""
        return (
            f"postgresql://postgres@127.0.0.1:{self.pg.port}/postgres"
            f"?sslmode=verify-full&sslrootcert={self.ca}"
        )

    def amqp(self, ca: Path | None = None, *, client_cert: bool = True) -> str:
        """amqps:// with the CA in pika's ``ssl_options``, and by default a client
        certificate whose key needs its passphrase."""
        options = f"'cafile':'{ca or self.ca}'"
        if client_cert:
            options += f",'certfile':'{self.client.cert}','keyfile':'{self.client.key}'"
            options += f",'password':'{KEY_PASSPHRASE}'"
        return f"amqps://app:{MQ_PASSWORD}@127.0.0.1:{self.node.port}/?ssl_options={{{options}}}"

    def env(self, queue: str, **more: str) -> dict[str, str]:
        return {
            "TXQUEUE_DATABASE_URL": self.db(),
            "TXQUEUE_AMQP_URL": self.amqp(),
            "TXQUEUE_TEST_QUEUE": queue,
            **more,
        }

    def assert_clean(self, output: str) -> None:
        """No password, passphrase or line of a private key in ``output``, nor in it
        unwrapped (the CLI wraps a long URL at the terminal's width, even within a word)."""
        output += "\n" + output.replace("\n", "")
        for secret in (PG_PASSWORD, MQ_PASSWORD, KEY_PASSPHRASE):
            assert secret not in output, f"a secret shows: {output}"
        for key in self.keys:
            for line in key.read_text().splitlines():
                if not line.startswith("-----"):
                    assert line not in output, f"a line of {key.name} shows: {output}"


# It starts a RabbitMQ node too: the tests that take it are marked RABBITMQ.
@pytest.fixture(scope="module")
def tls() -> Iterator[Tls]:
    with contextlib.ExitStack() as stack:
        pki = stack.enter_context(folder_of(None, "txqueue-pki-"))
        ca = Authority.create(pki, "ca")
        wrong = Authority.create(pki, "wrong-ca")
        server = ca.issue("server", "localhost", server=True)
        client_pair = ca.issue("client", "app", server=False, passphrase=KEY_PASSPHRASE)
        # The node boots (seconds of Erlang) while PostgreSQL's cluster is made.
        node = stack.enter_context(rabbit_node(ca.cert, server, "app", MQ_PASSWORD))
        served = stack.enter_context(folder_of(AS, "txqueue-pg-tls-"))
        key = server.give_to(AS, served)
        shutil.copyfile(ca.cert, served / "ca.pem")
        (served / "pg_hba.conf").write_text(HBA)
        pg = stack.enter_context(
            cluster(
                ssl="on",
                ssl_cert_file=str(key.cert),
                ssl_key_file=str(key.key),
                ssl_ca_file=str(served / "ca.pem"),
                hba_file=str(served / "pg_hba.conf"),
            )
        )
        keys = (ca.key, wrong.key, server.key, client_pair.key)
        found = Tls(ca.cert, wrong.cert, client_pair, pg, node, keys)
        with psycopg.connect(found.admin, autocommit=True) as c:
            c.execute(f"CREATE ROLE app LOGIN PASSWORD '{PG_PASSWORD}'")
            c.execute("CREATE DATABASE app OWNER app")
            # Password and server certificate only, as most deployments: a member of app.
            c.execute(f"CREATE ROLE web LOGIN PASSWORD '{PG_PASSWORD}' IN ROLE app")
        await_node(node)
        init = cli("init", "--database-url", found.db(), "--amqp-url", found.amqp())
        assert init.returncode == 0, init.stdout + init.stderr
        yield dataclasses.replace(found, init=init.stdout + init.stderr)


@pytest.fixture
def queue() -> str:
    """A queue of the test's own on the private node, which is deleted with the module."""
    return f"tls_{secrets.token_hex(5)}"


def _consumers(url: str, queue: str) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ok = conn.channel().queue_declare(f"txqueue.{queue}", passive=True)
        return int(ok.method.consumer_count)
    except pika.exceptions.ChannelClosedByBroker:
        return 0
    finally:
        if conn.is_open:
            conn.close()


def _purge(url: str, queue: str) -> int:
    """Drop the wake-ups waiting in ``queue``, as a lost message would be; how many."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        return int(conn.channel().queue_purge(f"txqueue.{queue}").method.message_count)
    finally:
        conn.close()


def _states(tls: Tls, queue: str) -> dict[str, str]:
    """The state of each task of ``queue``, by id."""
    sql = "SELECT id, state FROM txqueue_tasks WHERE queue = %s"
    with psycopg.connect(tls.db()) as c:
        return {str(i): s for i, s in c.execute(sql, (queue,))}


def _answers(port: int) -> bool:
    try:
        return http_get(port, "/")[0] == 200
    except urllib.error.URLError:
        return False


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """``txqueue <args>`` with ``env`` and none of this process's TXQUEUE_ settings."""
    return subprocess.Popen(
        [*TXQUEUE, *args],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("TXQUEUE_")} | env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    try:
        output, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate(timeout=10)
    return output


@RABBITMQ
def test_enqueue_worker_cleaner_cli_and_dashboard_over_tls(
    tls: Tls, queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    env = tls.env(queue, TXQUEUE_TEST_RECORD_DIR=str(tmp_path))
    outputs: list[str] = []

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = cli(*args, env=env)
        outputs.append(done.stdout + done.stderr)
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    # `txqueue init` ran in the fixture, so that each test can run alone.
    outputs.append(tls.init)
    assert "applied migrations 1 to " in tls.init
    # The ssl_options, client key and its passphrase included: RabbitMQ answered over TLS.
    shown = tls.init.replace("\n", "")
    assert f"RabbitMQ reachable at amqps://app:***@127.0.0.1:{tls.node.port}/" in shown
    assert "'password':'***'}" in shown

    # Enqueued by the CLI with no worker running, its wake-up lost: the cleaner reads the
    # queue's depth and sends it again.
    first = run("enqueue", "record", "--payload", '{"by": "cli"}', "--queue", queue).stdout.strip()
    assert _purge(tls.amqp(), queue) == 1
    report = json.loads(run("cleaner", "--once", "--grace", "0", "--json").stdout)
    assert report["ok"] and report["renotified"] == 1, report

    worker = _spawn(["worker", "--app", APP, "--poll-interval", "600", "--concurrency", "2"], env)
    try:
        wait_until(lambda: _states(tls, queue).get(first) == "succeeded", timeout=20, every=0.1)
        wait_until(lambda: _consumers(tls.amqp(), queue) == 1, timeout=20, every=0.2)
        # The worker polls every ten minutes: this one can only come by its wake-up, sent
        # by this process's publisher over amqps after the commit.
        client.configure(amqp_url=tls.amqp())
        try:
            with contextlib.closing(psycopg.connect(tls.db())) as conn, txqueue.transaction(conn):
                second = str(txqueue.enqueue(conn, Task("record", {"by": "api"}, queue=queue)))
            assert txqueue.flush(timeout=10), "RabbitMQ did not confirm the wake-up"
        finally:
            client.configure()
        started = time.monotonic()
        wait_until(lambda: _states(tls, queue).get(second) == "succeeded", timeout=15, every=0.05)
        assert time.monotonic() - started < 10
        with psycopg.connect(tls.admin) as admin:
            ssl = admin.execute(
                "SELECT count(*), bool_and(s.ssl) FROM pg_stat_ssl s"
                " JOIN pg_stat_activity a USING (pid) WHERE a.usename = 'app'"
            ).fetchone()
        assert ssl is not None and ssl[0] >= 1 and ssl[1] is True, ssl
    finally:
        worker_output = _stop(worker)
    outputs.append(worker_output)
    assert worker.returncode == 0, worker_output
    assert "woken by RabbitMQ" in worker_output and "Traceback" not in worker_output

    status = json.loads(run("status", "--json").stdout)
    [entry] = status["queues"]
    assert (entry["queue"], entry["succeeded"], entry["pending"]) == (queue, 2, 0)
    assert entry["messages"] == 0  # read from RabbitMQ over amqps
    listed = run("list", "--queue", queue, "--json").stdout
    assert {t["id"] for t in json.loads(listed)["tasks"]} == {first, second}

    port = free_port()
    dashboard = _spawn(["dashboard", "--port", str(port)], env)
    try:
        assert dashboard.stdout is not None
        banner = dashboard.stdout.readline()
        outputs.append(banner)
        assert f"on http://127.0.0.1:{port}/ for postgresql://app:***@" in banner
        assert "sslpassword=***" in banner
        wait_until(lambda: _answers(port), timeout=15, every=0.1)
        page = http_get(port, "/")
        assert page[0] == 200 and queue in page[1], page
    finally:
        outputs.append(_stop(dashboard))
    outputs.append(caplog.text)
    for output in outputs:
        tls.assert_clean(output)


@RABBITMQ
def test_plaintext_and_a_missing_client_certificate_are_refused(tls: Tls) -> None:
    """So the rest of this module did go through TLS, with the client's certificate; and
    libpq refuses a key that others can read."""
    shared = tls.client.key.with_name("shared.key")
    shutil.copyfile(tls.client.key, shared)
    shared.chmod(0o644)
    for url, refusal in [
        (tls.db(sslmode="disable"), "no encryption"),
        (tls.db().split("&sslcert=")[0], "connection requires a valid client certificate"),
        (tls.db().replace(str(tls.client.key), str(shared)), "has group or world access"),
    ]:
        result = cli("status", "--database-url", url)
        line = one_line_error(result, "cannot connect to PostgreSQL", refusal)
        assert line.startswith("txqueue: error: ")
        tls.assert_clean(result.stdout + result.stderr)


def _documented_urls(tls: Tls) -> tuple[str, str]:
    """TXQUEUE_DATABASE_URL and TXQUEUE_AMQP_URL as the TLS how-to sets them,
    pointed at the private servers (the web role: password and server certificate only)."""
    section = (ROOT / "docs" / "how-to" / "tls.md").read_text()
    found = dict(
        shlex.split(line)[0].split("=", 1)
        for line in section.splitlines()
        if line.startswith(("TXQUEUE_DATABASE_URL=", "TXQUEUE_AMQP_URL="))
    )
    here = {
        "app:PASSWORD@db.example.com:5432": f"web:{PG_PASSWORD}@localhost:{tls.pg.port}",
        "app:PASSWORD@mq.example.com:5671": f"app:{MQ_PASSWORD}@localhost:{tls.node.port}",
        "/etc/txqueue/ca.pem": str(tls.ca),
    }
    urls = []
    for name in ("TXQUEUE_DATABASE_URL", "TXQUEUE_AMQP_URL"):
        url = found[name]
        for written, meant in here.items():
            url = url.replace(written, meant)
        urls.append(url)
    return urls[0], urls[1]


@RABBITMQ
def test_the_tls_pages_urls_work_as_written(tls: Tls) -> None:
    """The common case: verify-full against your CA (the host name checked too: localhost
    here), a password, no client certificate; amqps:// with the CA in ssl_options."""
    db, mq = _documented_urls(tls)
    result = cli("init", env={"TXQUEUE_DATABASE_URL": db, "TXQUEUE_AMQP_URL": mq})
    assert result.returncode == 0 and not result.stderr, result.stderr
    shown = result.stdout.replace("\n", "")
    assert f"RabbitMQ reachable at amqps://app:***@localhost:{tls.node.port}/" in shown
    wrong = cli("status", "--database-url", db.replace(str(tls.ca), str(tls.wrong_ca)))
    one_line_error(wrong, "cannot connect to PostgreSQL", "certificate verify failed")
    # The right CA, but a certificate for another host (reached at 127.0.0.1 all the same).
    elsewhere = db.replace("@localhost:", "@db.example.com:") + "&hostaddr=127.0.0.1"
    misnamed = cli("status", "--database-url", elsewhere)
    one_line_error(misnamed, "cannot connect to PostgreSQL", 'does not match host name "db.example')
    for done in (result, wrong, misnamed):
        assert done is result or done.returncode == 1
        tls.assert_clean(done.stdout + done.stderr)


@RABBITMQ
@pytest.mark.parametrize("command", [["init"], ["status"], ["cleaner", "--once"]])
def test_a_wrong_ca_for_postgresql_is_one_line(tls: Tls, command: list[str]) -> None:
    result = cli(*command, "--database-url", tls.db(ca=tls.wrong_ca))
    line = one_line_error(result, "cannot connect to PostgreSQL", "certificate verify failed")
    assert line.startswith("txqueue: error: ") and "app:***@127.0.0.1" in line
    assert result.returncode == 1
    tls.assert_clean(result.stdout + result.stderr)


@RABBITMQ
def test_a_worker_given_a_wrong_ca_for_postgresql_stops_with_one_line(tls: Tls) -> None:
    """A certificate the CA cannot vouch for will not change by retrying: like a wrong
    password, the worker exits at once, saying why in one line."""
    worker = subprocess.Popen(
        [*TXQUEUE, "worker", "--app", APP, "--database-url", tls.db(ca=tls.wrong_ca)],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("TXQUEUE_")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = worker.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        worker.kill()
        stdout, stderr = worker.communicate(timeout=10)
    tls.assert_clean(stdout + stderr)
    result = subprocess.CompletedProcess(worker.args, worker.returncode, stdout, stderr)
    one_line_error(result, "cannot connect to PostgreSQL", "certificate verify failed")


@RABBITMQ
def test_a_wrong_ca_for_rabbitmq_is_one_line(tls: Tls, queue: str, tmp_path: Path) -> None:
    env = {
        "TXQUEUE_DATABASE_URL": tls.db(),
        "TXQUEUE_AMQP_URL": tls.amqp(ca=tls.wrong_ca, client_cert=False),
        "TXQUEUE_TEST_QUEUE": queue,
        "TXQUEUE_TEST_RECORD_DIR": str(tmp_path),
    }
    enqueued = cli("enqueue", "record", "--queue", queue, env=env)  # its wake-up is refused
    assert enqueued.returncode == 0, enqueued.stderr
    outputs = [enqueued.stdout + enqueued.stderr]
    # The cleaner cannot do its work (read the queue, re-send the wake-up): it exits 1,
    # its one-line report saying why.
    cleaner = cli("cleaner", "--once", "--grace", "0", env=env)
    outputs.append(cleaner.stdout + cleaner.stderr)
    assert cleaner.returncode == 1 and not cleaner.stderr, cleaner.stderr
    [report] = cleaner.stdout.replace("\n", "").splitlines() or [""]
    assert "certificate verify failed" in report and "nothing re-notified" in report, report
    # Where the database is enough, the broker's refusal is a warning, in one line too.
    status = cli("status", env=env)
    outputs.append(status.stdout + status.stderr)
    assert status.returncode == 0, status.stderr
    [warning] = status.stderr.strip().splitlines()
    assert warning.startswith(
        f"txqueue: warning: cannot connect to RabbitMQ at amqps://app:***@127.0.0.1:{tls.node.port}/"
    )
    assert "certificate verify failed" in warning
    # A worker says so once, and runs the task by polling the database.
    worker = subprocess.Popen(
        [*TXQUEUE, "worker", "--app", APP, "--poll-interval", "0.2"],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("TXQUEUE_")} | env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(
            lambda: set(_states(tls, queue).values()) == {"succeeded"}, timeout=20, every=0.1
        )
    finally:
        worker_output = _stop(worker)
    outputs.append(worker_output)
    refused = [line for line in worker_output.splitlines() if "WARNING txqueue.broker" in line]
    assert len(refused) == 1 and "certificate verify failed" in refused[0], worker_output
    assert "Traceback" not in worker_output
    for output in outputs:
        tls.assert_clean(output)


@RABBITMQ
def test_amqps_with_the_ca_in_ssl_cert_file(tls: Tls) -> None:
    """The other natural way: a plain amqps:// URL, and the CA where Python's default
    context looks (SSL_CERT_FILE); the host name is checked against the certificate."""
    url = f"amqps://app:{quote(MQ_PASSWORD)}@localhost:{tls.node.port}/"
    args = ("init", "--database-url", tls.db(), "--amqp-url", url)
    trusted = cli(*args, env={"SSL_CERT_FILE": str(tls.ca)})
    assert trusted.returncode == 0, trusted.stderr
    assert f"RabbitMQ reachable at amqps://app:***@localhost:{tls.node.port}/" in trusted.stdout
    untrusted = cli(*args, env={"SSL_CERT_FILE": str(tls.wrong_ca)})
    assert untrusted.returncode == 0, untrusted.stderr  # init: the schema is enough
    [warning] = untrusted.stderr.strip().splitlines()
    assert "certificate verify failed" in warning
    for result in (trusted, untrusted):
        tls.assert_clean(result.stdout + result.stderr)


@pytest.mark.parametrize(
    ("url", "shown", "hidden"),
    [
        (
            "postgresql://u:pw@h/db?sslmode=verify-full&sslpassword=k%2Bp&password=pw2",
            "postgresql://u:***@h/db?sslmode=verify-full&sslpassword=***&password=***",
            ["pw", "k+p", "pw2"],
        ),
        (
            "amqps://u:pw@h/?ssl_options={'cafile':'/ca.pem','password':'kp'}",
            "amqps://u:***@h/?ssl_options={'cafile':'/ca.pem','password':'***'}",
            ["pw", "kp"],
        ),
        (
            "amqps://h/?ssl_options=%7B%27keyfile%27%3A%27%2Fk%27%2C%27password%27%3A%27kp%27%7D",
            "amqps://h/?ssl_options={'keyfile':'/k','password':'***'}",
            ["kp"],
        ),
    ],
)
def test_redact_and_scrub_hide_the_secrets_of_a_query(
    url: str, shown: str, hidden: list[str]
) -> None:
    assert redaction.redact(url) == shown
    for secret in hidden:
        assert redaction.scrub(f"bad decrypt with {secret} for /ca.pem", url) == (
            "bad decrypt with *** for /ca.pem"
        )


def test_malformed_ssl_options_are_one_line(tmp_path: Path) -> None:
    url = f"amqps://app:{MQ_PASSWORD}@127.0.0.1:1/?ssl_options={{'password':'{KEY_PASSPHRASE}'"
    result = cli("init", "--database-url", f"sqlite:///{tmp_path / 't.db'}", "--amqp-url", url)
    one_line_error(result, "AMQP URL's ssl_options must be a Python dict", "'password':'***'")
    assert MQ_PASSWORD not in result.stderr and KEY_PASSPHRASE not in result.stderr
