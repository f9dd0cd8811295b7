"""How-to "SQLAlchemy": an ORM object and its task in one Session transaction."""

import os

from sqlalchemy import create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import txqueue
from myapp.tasks import send_receipt

engine = create_engine(os.environ["TXQUEUE_DATABASE_URL"])


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)


Base.metadata.create_all(engine)

# --8<-- [start:session]
with Session(engine) as session, session.begin():
    session.add(Order(id=42))
    send_receipt.enqueue(session, order=42)
# the wake-up goes after the commit
# --8<-- [end:session]

with engine.connect() as conn:
    [task] = txqueue.list_tasks(conn)
assert task.payload == {"order": 42} and task.state == "pending"
