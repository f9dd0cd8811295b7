"""``txqueue.App``'s settings: read and checked once, each error naming its field, never a
password shown, and its workers and cleaners built with them. No services needed: an App
connects to nothing until it is used."""

from __future__ import annotations

import inspect

import pytest

import txqueue
from txqueue import App, Cleaner, Worker, config, wiring
from txqueue.app import OWNED, CleanerOptions, WorkerOptions
from txqueue.broker import link
from txqueue.broker.link import parameters
from txqueue.errors import ConfigError
from txqueue.store import SQLITE, PostgresStore, SqliteStore
from txqueue.worker.settings import WorkerSettings

PG = "postgresql://app:pg-secret@db.example:5432/shop"
MQ = "amqp://app:mq-secret@mq.example:5672/shop"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (config.DATABASE_ENV, config.AMQP_ENV, config.QUEUE_TYPE_ENV):
        monkeypatch.delenv(name, raising=False)


def registry() -> txqueue.Registry:
    r = txqueue.Registry()
    r.task("t", queue="q")(lambda payload: None)
    return r


def test_repr_and_str_never_show_a_password() -> None:
    app = App(database_url=PG, amqp_url=MQ, queue_type="quorum")
    for text in (repr(app), str(app), f"{app}"):
        assert "secret" not in text
        assert "app:***@db.example:5432/shop" in text and "app:***@mq.example" in text
        assert "'quorum'" in text


def test_settings_are_read_once_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(config.DATABASE_ENV, PG)
    monkeypatch.setenv(config.AMQP_ENV, MQ)
    monkeypatch.setenv(config.QUEUE_TYPE_ENV, "quorum")
    app = App()
    for name in (config.DATABASE_ENV, config.AMQP_ENV):
        monkeypatch.setenv(name, "nonsense://")
    monkeypatch.setenv(config.QUEUE_TYPE_ENV, "stream")
    assert (app.database_url, app.amqp_url, app.queue_type) == (PG, MQ, "quorum")
    assert app.delivery.amqp_url == MQ and app.delivery.queue_type == "quorum"


def test_defaults_and_explicit_values() -> None:
    app = App()
    assert app.database_url == config.DEFAULT_DATABASE_URL and app.amqp_url is None
    assert app.queue_type == "classic" and app.registry is None
    explicit = App(registry(), database_url="postgresql+psycopg://h/db", amqp_url=MQ)
    assert explicit.database_url == "postgresql://h/db"  # txqueue's form
    assert isinstance(explicit.store, PostgresStore) and explicit.clock is None


def test_no_broker_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(config.AMQP_ENV, MQ)
    monkeypatch.setenv(config.QUEUE_TYPE_ENV, "stream")  # unread: no broker, no queues
    app = App(amqp_url=None)
    assert app.amqp_url is None and app.queue_type == "classic"


def test_settings_are_read_only() -> None:
    app = App()
    for name in ("registry", "database_url", "amqp_url", "queue_type", "store", "clock"):
        with pytest.raises(AttributeError):
            setattr(app, name, None)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"database_url": "mysql://u:pw-secret@h/db"}, "database_url: unsupported"),
        ({"database_url": "postgresql://u:pw-secret@h:port/db"}, "database_url: malformed"),
        ({"database_url": "sqlite:///:memory:"}, "database_url: SQLite URL must name a file"),
        ({"amqp_url": "http://u:pw-secret@h/"}, "amqp_url: AMQP URL must look like"),
        ({"amqp_url": "amqp://u:pw-secret@h:port/"}, "amqp_url: malformed AMQP URL"),
        ({"amqp_url": "amqp://u:pw-secret@h/?heartbeat=5s"}, "amqp_url: AMQP URL's heartbeat"),
        ({"queue_type": "stream"}, "queue_type must be one of classic, quorum; got 'stream'"),
        ({"amqp_url": None, "queue_type": "stream"}, "queue_type must be one of"),
        ({"queue_type": 3}, "queue_type must be one of"),
    ],
)
def test_a_bad_setting_is_a_config_error_naming_its_field(
    options: dict[str, object], field: str
) -> None:
    with pytest.raises(ConfigError, match=field) as caught:
        App(**options)  # type: ignore[arg-type]
    assert "secret" not in str(caught.value)


def test_a_bad_setting_from_the_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(config.AMQP_ENV, "http://u:pw-secret@h/")
    with pytest.raises(ConfigError, match=r"amqp_url \(from TXQUEUE_AMQP_URL\)") as caught:
        App()
    assert "secret" not in str(caught.value)
    monkeypatch.setenv(config.AMQP_ENV, MQ)
    monkeypatch.setenv(config.QUEUE_TYPE_ENV, "stream")
    with pytest.raises(ConfigError, match="TXQUEUE_AMQP_QUEUE_TYPE must be one of"):
        App()
    monkeypatch.delenv(config.AMQP_ENV)
    monkeypatch.setenv(config.DATABASE_ENV, "mysql://h/db")
    with pytest.raises(ConfigError, match=r"database_url \(from TXQUEUE_DATABASE_URL\)"):
        App()


def test_registry_must_be_a_registry() -> None:
    with pytest.raises(ConfigError, match=r"registry must be a txqueue\.Registry, not dict"):
        App({})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"registry: App\.worker needs one"):
        App().worker()


def test_sqlite_apps_have_clocks_of_their_own() -> None:
    a, b = App(database_url="sqlite:///a.db"), App(database_url="sqlite:///a.db")
    assert isinstance(a.store, SqliteStore) and isinstance(b.store, SqliteStore)
    assert a.clock is a.store.clock and b.clock is b.store.clock
    assert len({id(a.clock), id(b.clock), id(SQLITE.clock)}) == 3
    assert a.clock is not None and b.clock is not None
    a.clock.skew = 60.0
    assert b.clock.skew == 0.0 and SQLITE.clock.skew == 0.0


def test_workers_and_cleaners_get_the_apps_settings() -> None:
    r = registry()
    app = App(r, database_url=PG, amqp_url=MQ, queue_type="quorum")
    worker = app.worker(concurrency=2, queues=["q"])
    assert (worker.registry, worker.database_url, worker.amqp_url) == (r, PG, MQ)
    assert worker.queue_type == "quorum" and worker.concurrency == 2
    cleaner = app.cleaner(interval=5.0)
    assert (cleaner.registry, cleaner.database_url, cleaner.amqp_url) == (r, PG, MQ)
    assert cleaner.queue_type == "quorum" and cleaner.interval == 5.0
    local = App(r, database_url="sqlite:///a.db", amqp_url=None)
    assert local.worker().amqp_url is None and local.worker().poll_interval == 0.1


def test_a_workers_cleaner_passes_take_the_cleaners_options_and_name_a_bad_one() -> None:
    worker = Worker(registry(), database_url=PG, amqp_url=MQ, cleaner={"interval": 5, "retain": 60})
    cleaner = worker._cleaner
    assert cleaner is not None and (cleaner.interval, cleaner.retain) == (5.0, 60.0)
    assert cleaner.registry is worker.registry and cleaner.amqp_url == MQ
    assert Worker(registry(), database_url=PG, cleaner=False)._cleaner is None
    with pytest.raises(ConfigError, match="cleaner: interval must be a number of seconds"):
        Worker(registry(), database_url=PG, cleaner={"interval": 0})
    with pytest.raises(ConfigError, match="cleaner: no option 'retention'; it takes interval"):
        Worker(registry(), database_url=PG, cleaner={"retention": 60})  # type: ignore[typeddict-unknown-key]
    with pytest.raises(ConfigError, match="cleaner must be True, False or the cleaner's options"):
        Worker(registry(), database_url=PG, cleaner="yes")  # type: ignore[arg-type]


def test_what_the_app_owns_cannot_be_passed_to_its_workers() -> None:
    app = App(registry(), database_url=PG, amqp_url=None)
    with pytest.raises(ConfigError, match="database_url: set by the App"):
        app.worker(database_url="postgresql://other/db")  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="amqp_url: set by the App"):
        app.cleaner(amqp_url=MQ)  # type: ignore[call-arg]


def test_a_store_or_delivery_given_that_does_not_fit_is_refused() -> None:
    app = App(registry(), database_url="sqlite:///a.db", amqp_url=None)
    with (
        wiring.given(wiring.Wiring(store=app.store)),
        pytest.raises(ConfigError, match="store: a SqliteStore cannot serve postgresql://"),
    ):
        Worker(registry(), database_url=PG)
    with (
        wiring.given(wiring.Wiring(delivery=app.delivery)),
        pytest.raises(ConfigError, match="delivery: its broker"),
    ):
        Cleaner(database_url="sqlite:///a.db", amqp_url=MQ)


def test_an_apps_workers_and_cleaners_take_its_store_and_delivery_and_no_one_elses() -> None:
    app = App(registry(), database_url="sqlite:///a.db", amqp_url=None)
    worker, cleaner = app.worker(cleaner=False), app.cleaner()
    assert worker._store is cleaner._store is app.store
    assert worker._delivery is cleaner._delivery is app.delivery
    alone = Worker(registry(), database_url="sqlite:///a.db", amqp_url=None, cleaner=False)
    assert alone._store is not app.store and alone._delivery is not app.delivery
    assert wiring.current() == wiring.Wiring()  # given only while they were made


def _own_parameters(cls: type) -> set[str]:
    names = set(inspect.signature(cls.__init__).parameters) - {"self"}  # type: ignore[misc]
    return names - OWNED


def test_the_option_types_list_the_workers_and_cleaners_own_parameters() -> None:
    assert set(WorkerOptions.__annotations__) == set(WorkerSettings.__annotations__) - OWNED
    assert set(CleanerOptions.__annotations__) == _own_parameters(Cleaner)


def test_worker_and_cleaner_take_an_explicit_queue_type_and_check_it() -> None:
    worker = Worker(registry(), database_url=PG, amqp_url=MQ, queue_type="quorum")
    assert worker.queue_type == "quorum"
    with pytest.raises(ConfigError, match="queue_type must be one of"):
        Cleaner(database_url=PG, amqp_url=MQ, queue_type="lazy")
    # Without a broker the environment's type is not read, as before.
    assert Cleaner(database_url=PG, amqp_url=None).queue_type == "classic"


def test_the_broker_heartbeat_is_five_seconds_unless_the_url_gives_one() -> None:
    assert parameters("amqp://u:p@h/").heartbeat == link.HEARTBEAT == 5
    assert parameters("amqp://u:p@h/?heartbeat=20").heartbeat == 20
    assert parameters("amqp://u:p@h/?heartbeat=0").heartbeat == 0  # none


MANAGEMENT = [
    "retry",
    "retry_async",
    "retry_failed",
    "retry_failed_async",
    "cancel",
    "cancel_async",
    "get_task",
    "get_task_async",
    "list_tasks",
    "list_tasks_async",
    "history",
    "pause_queue",
    "resume_queue",
    "limit_queue",
    "get_queue",
    "list_queues",
    "enqueue",
    "enqueue_many",
    "enqueue_async",
    "enqueue_many_async",
]


@pytest.mark.parametrize("name", MANAGEMENT)
def test_the_app_has_each_module_level_call_with_its_parameters(name: str) -> None:
    """So that a process with two Apps never needs the module-level default."""
    function = inspect.signature(getattr(txqueue, name))
    method = inspect.signature(getattr(App(), name))
    assert method.parameters == function.parameters
    assert method.return_annotation == function.return_annotation
