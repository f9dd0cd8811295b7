"""A FastAPI service that enqueues from a request and runs its own worker.

    DATABASE_URL=postgresql://... TXQUEUE_AMQP_URL=amqp://... uvicorn examples.fastapi_app.app:app

POST /orders saves an order and enqueues its receipt in one AsyncSession transaction (on
asyncpg): both commit, or neither does. The worker runs beside the app for as long as it
serves (its lifespan) and marks the order once the receipt is "sent".
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from fastapi import FastAPI, HTTPException
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

import txqueue
from txqueue import Task

DATABASE_URL = os.environ["DATABASE_URL"]  # postgresql://user@host/db
engine = create_async_engine(DATABASE_URL.replace("postgresql://", "postgresql+asyncpg://", 1))
registry = txqueue.Registry()


@registry.task("send_receipt", queue="example_receipts")
def send_receipt(payload: dict[str, Any]) -> None:
    # A real handler would e-mail the customer; this one records that it ran.
    with psycopg.connect(DATABASE_URL) as conn:
        conn.execute("UPDATE orders SET receipt_sent = true WHERE id = %s", (payload["order"],))


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with txqueue.Worker(registry, database_url=DATABASE_URL).serving():
        yield
    await engine.dispose()


app = FastAPI(lifespan=lifespan)


@app.post("/orders")
async def create_order(total: int, fail_after_enqueue: bool = False) -> dict[str, Any]:
    async with AsyncSession(engine) as session, session.begin():
        result = await session.execute(
            text("INSERT INTO orders (total) VALUES (:total) RETURNING id"), {"total": total}
        )
        order_id = result.scalar_one()
        await txqueue.enqueue_async(
            session, Task("send_receipt", {"order": order_id}, queue="example_receipts")
        )
        if fail_after_enqueue:  # the order and its task roll back together
            raise HTTPException(status_code=409, detail="rolled back on purpose")
    return {"id": order_id}


@app.get("/orders/{order_id}")
async def get_order(order_id: int) -> dict[str, Any]:
    async with AsyncSession(engine) as session:
        row = (
            await session.execute(
                text("SELECT id, total, receipt_sent FROM orders WHERE id = :id"), {"id": order_id}
            )
        ).one_or_none()
    if row is None:
        raise HTTPException(status_code=404, detail="no such order")
    return {"id": row.id, "total": row.total, "receipt_sent": row.receipt_sent}
