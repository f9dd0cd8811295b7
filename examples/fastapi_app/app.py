"""A FastAPI service that enqueues from a request and runs its own worker.

    export DATABASE_URL=postgresql+asyncpg://user@host/db TXQUEUE_AMQP_URL=amqp://...
    uvicorn examples.fastapi_app.app:app

POST /orders saves an order and enqueues its receipt in one AsyncSession transaction (on
asyncpg): both commit, or neither does. At start-up the service creates or upgrades
txqueue's tables; its worker runs beside it for as long as it serves (its lifespan).
"""

from __future__ import annotations

# --8<-- [start:imports]
import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

import txqueue

from .tasks import registry, send_receipt

# --8<-- [end:imports]
# --8<-- [start:engine]
DATABASE_URL = os.environ["DATABASE_URL"]  # postgresql+asyncpg://app@db/app
engine = create_async_engine(DATABASE_URL)
async_session = async_sessionmaker(engine, expire_on_commit=False)
# --8<-- [end:engine]


# --8<-- [start:lifespan]
@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # Idempotent, and safe when several replicas start at once (the migrations take a lock).
    await asyncio.to_thread(txqueue.App(database_url=DATABASE_URL).init)
    # It also runs the cleaner's passes, one replica at a time: a task whose replica was
    # killed mid-run is put back once its lease runs out, with no cron job to add.
    async with txqueue.Worker(registry, database_url=DATABASE_URL).serving():
        yield
    await engine.dispose()


app = FastAPI(lifespan=lifespan)
# --8<-- [end:lifespan]


# --8<-- [start:endpoint]
@app.post("/orders")
async def create_order(total: int, fail_after_enqueue: bool = False) -> dict[str, Any]:
    async with async_session.begin() as session:
        result = await session.execute(
            text("INSERT INTO orders (total) VALUES (:total) RETURNING id"), {"total": total}
        )
        order_id = result.scalar_one()
        await send_receipt.enqueue_async(session, order=order_id)
        if fail_after_enqueue:  # the order and its task roll back together
            raise HTTPException(status_code=409, detail="rolled back on purpose")
    return {"id": order_id}


# --8<-- [end:endpoint]


@app.get("/orders/{order_id}")
async def get_order(order_id: int) -> dict[str, Any]:
    async with async_session() as session:
        row = (
            await session.execute(
                text("SELECT id, total, receipt_sent FROM orders WHERE id = :id"), {"id": order_id}
            )
        ).one_or_none()
    if row is None:
        raise HTTPException(status_code=404, detail="no such order")
    return {"id": row.id, "total": row.total, "receipt_sent": row.receipt_sent}
