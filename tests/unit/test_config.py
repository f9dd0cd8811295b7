"""Configuration: URLs checked, redacted, and split into a cluster's hosts."""

from __future__ import annotations

import pytest

import txqueue
from txqueue import config, redaction, units
from txqueue.broker.link import Nodes


def test_urls_are_checked_and_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    assert redaction.redact("postgresql://u:pw@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redaction.redact("postgresql://h/db") == "postgresql://h/db"
    # An application's SQLAlchemy URL, whatever its driver, names the same database.
    for driver in ("psycopg", "psycopg2", "asyncpg", "pg8000"):
        assert config.database_url(f"postgresql+{driver}://u@h/db") == "postgresql://u@h/db"
    assert config.database_url("sqlite+aiosqlite:///x.db") == "sqlite:///x.db"
    assert redaction.scrub("failed for pw at h", "amqp://u:pw@h/") == "failed for *** at h"
    assert config.database_url("sqlite:///x.db") == "sqlite:///x.db"
    assert config.database_url("sqlite+pysqlite:////var/x.db") == "sqlite:////var/x.db"
    for bad in ("sqlite://", "sqlite:///:memory:", "sqlite://host/x.db"):
        with pytest.raises(txqueue.ConfigError, match="must name a file"):
            config.database_url(bad)
    monkeypatch.delenv(config.DATABASE_ENV, raising=False)
    assert config.database_url() == "sqlite:///txqueue.db"  # the embedded default
    with pytest.raises(txqueue.ConfigError, match=r"u:\*\*\*@"):
        config.amqp_url("http://u:pw@h/")
    monkeypatch.delenv(config.AMQP_ENV, raising=False)
    assert config.amqp_url() is None  # no broker: workers poll
    monkeypatch.setenv(config.AMQP_ENV, "amqp://h/")
    assert config.amqp_url() == "amqp://h/"
    assert config.amqp_url("amqps://other/") == "amqps://other/"  # the flag wins


def test_urls_may_list_several_hosts() -> None:
    # A primary and its standby, as libpq takes them; a local socket keeps its "//".
    ha = "postgresql://u:pw@db1:5432,db2:5433/app?target_session_attrs=read-write"
    assert config.database_url(ha) == ha
    assert redaction.redact(ha) == ha.replace(":pw@", ":***@")
    assert config.database_url("postgresql:///app?host=/run/pg") == "postgresql:///app?host=/run/pg"
    with pytest.raises(txqueue.ConfigError, match="malformed database URL"):
        config.database_url("postgresql://u@db1:5432,db2:x/app")
    # A RabbitMQ cluster's nodes: one URL each, sharing the rest.
    nodes = "amqp://u:pw@mq1:5672,mq2,mq3:5673/vh?heartbeat=5"
    assert config.amqp_url(nodes) == nodes
    assert config.amqp_nodes(nodes) == [
        "amqp://u:pw@mq1:5672/vh?heartbeat=5",
        "amqp://u:pw@mq2/vh?heartbeat=5",
        "amqp://u:pw@mq3:5673/vh?heartbeat=5",
    ]
    for bad in ("amqp://u@mq1,/", "amqp://u@mq1:5672,mq2:x/"):
        with pytest.raises(txqueue.ConfigError, match="AMQP URL"):
            config.amqp_url(bad)


def test_a_database_url_without_its_double_slash_is_named_not_read_as_a_socket() -> None:
    # urlsplit reads "postgres:/h/db" as a local socket and a database named "h/db".
    for bad, shown in (
        ("postgres:/127.0.0.1/db", "postgres:/127.0.0.1/db"),
        ("postgresql:/u:pw@h:5432/db", "postgresql:/***@h:5432/db"),
        ("postgresql:/u:p/w:@x@h/db", "postgresql:/***@h/db"),  # a password of :/@ too
        ("postgresql:h/db", "postgresql:h/db"),
    ):
        with pytest.raises(txqueue.ConfigError) as caught:
            config.database_url(bad)
        message = str(caught.value)
        assert "malformed database URL" in message and "postgresql://user@host:port/db" in message
        assert repr(shown) in message and "pw" not in message and "p/w" not in message
    assert config.database_url("postgresql:///db") == "postgresql:///db"  # a local socket
    assert config.database_url("postgres://h/db") == "postgresql://h/db"


def test_a_lost_broker_connection_tries_every_node_before_waiting() -> None:
    nodes = Nodes("amqp://mq1,mq2,mq3/")
    assert [nodes.next()[0] for _ in range(4)] == [
        "amqp://mq1/",
        "amqp://mq2/",
        "amqp://mq3/",
        "amqp://mq1/",  # round and round
    ]
    assert [nodes.delay(n) for n in (1, 2, 4, 5)] == [0, 0, 0, 0]
    assert 0 < nodes.delay(3) <= nodes.delay(6) * 2
    assert Nodes("amqp://mq1/").delay(1) > 0


@pytest.mark.parametrize(
    ("given", "size"),
    [
        ("200MB", 200 * 2**20),
        ("200M", 200 * 2**20),
        ("1.5GiB", 3 * 2**29),
        ("512k", 2**19),
        (1000, 1000),
        (" 64 mb ", 64 * 2**20),
    ],
)
def test_sizes_read_with_binary_units(given: str | int, size: int) -> None:
    assert units.size(given, "max_memory_per_child") == size


@pytest.mark.parametrize("given", ["abc", "-1", "0", True, "5TB", "", "1e30"])
def test_a_bad_size_is_refused_naming_the_field(given: str | int) -> None:
    with pytest.raises(txqueue.ConfigError, match=r"^max_memory_per_child: expected bytes"):
        units.size(given, "max_memory_per_child")
