"""How-to "Atomic tasks": transfers applied exactly once, from SQL and from SQLAlchemy Core."""

import os

import psycopg
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import txqueue

url = os.environ["TXQUEUE_DATABASE_URL"]
registry = txqueue.Registry()
with psycopg.connect(url, autocommit=True) as setup:
    setup.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)")
    setup.execute("INSERT INTO accounts VALUES (1, 100), (2, 0)")


# --8<-- [start:transfer]
@registry.task(queue="payments", atomic=True, context=True)
def transfer(ctx: txqueue.TaskContext, src: int, dst: int, cents: int) -> None:
    ctx.conn.execute("UPDATE accounts SET balance = balance - %s WHERE id = %s", (cents, src))
    ctx.conn.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", (cents, dst))


# --8<-- [end:transfer]


class Base(DeclarativeBase):
    pass


class Account(Base):
    __tablename__ = "accounts"
    id: Mapped[int] = mapped_column(primary_key=True)
    balance: Mapped[int]


# --8<-- [start:core]
from sqlalchemy import update
from sqlalchemy.dialects import postgresql  # SQLite: sqlite.dialect(paramstyle="named")

DIALECT = postgresql.psycopg.dialect()


def run(ctx, statement):
    compiled = statement.compile(dialect=DIALECT)
    return ctx.conn.execute(str(compiled), compiled.params)


@registry.task(atomic=True, context=True)
def credit(ctx: txqueue.TaskContext, account: int) -> None:
    run(ctx, update(Account).where(Account.id == account).values(balance=Account.balance + 1))


# --8<-- [end:core]


with psycopg.connect(url) as conn:
    transfer.enqueue(conn, src=1, dst=2, cents=30)
    credit.enqueue(conn, account=2)
txqueue.Worker(registry, database_url=url, amqp_url=None, queues=["payments", "default"]).run(
    burst=True
)
with psycopg.connect(url) as conn:
    balances = conn.execute("SELECT id, balance FROM accounts ORDER BY id").fetchall()
assert balances == [(1, 70), (2, 31)], balances
