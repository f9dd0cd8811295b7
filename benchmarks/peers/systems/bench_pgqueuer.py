"""PgQueuer: workers run ``pgq run bench_pgqueuer:create --batch-size 50``, woken by
LISTEN/NOTIFY, on an asyncpg pool (its drivers page: the pool is the driver "for improved
throughput under high concurrency"; asyncpg is about twice psycopg in its benchmark page).

    python -m bench_pgqueuer drain N | latency N RATE FIRST
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import asyncpg
import psycopg
from harness import produce, stamp
from pgqueuer import PgQueuer
from pgqueuer.db import SyncPsycopgDriver
from pgqueuer.models import Job
from pgqueuer.queries import SyncQueries


@asynccontextmanager
async def create() -> AsyncIterator[PgQueuer]:
    """The factory ``pgq run`` calls: in this release, an async context manager."""
    # The pool's sizes are those of the drivers page's example.
    async with asyncpg.create_pool(
        os.environ["PEERS_DATABASE_URL"], min_size=2, max_size=10
    ) as pool:
        pgq = PgQueuer.from_asyncpg_pool(pool)

        @pgq.entrypoint("stamp")
        async def stamp_job(job: Job) -> None:
            stamp(int(job.payload))

        yield pgq


def main() -> None:
    # Its documented way to enqueue from a plain script: the sync psycopg driver, autocommit,
    # so each enqueue call is its own transaction.
    with psycopg.connect(os.environ["PEERS_DATABASE_URL"], autocommit=True) as conn:
        queries = SyncQueries(SyncPsycopgDriver(conn))

        def batch(indices: Sequence[int]) -> None:
            queries.enqueue(
                ["stamp"] * len(indices), [str(i).encode() for i in indices], [0] * len(indices)
            )

        def one(index: int) -> None:
            queries.enqueue("stamp", str(index).encode())

        produce(batch, one)


if __name__ == "__main__":
    main()
