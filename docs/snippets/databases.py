"""How-to "Several databases": two shards, each enqueue in its own database's transaction,
one fleet of workers running both."""

import atexit
import os
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg

admin = os.environ.get("TXQUEUE_TEST_DATABASE_URL") or os.environ["TXQUEUE_DATABASE_URL"]
made = [f"shop_{uuid.uuid4().hex[:8]}" for _ in range(2)]
with psycopg.connect(admin, autocommit=True) as c:
    for name in made:
        c.execute(f"CREATE DATABASE {name}")
eu_url, us_url = (urlunsplit(urlsplit(admin)._replace(path=f"/{n}")) for n in made)


@atexit.register
def drop() -> None:
    with psycopg.connect(admin, autocommit=True) as c:
        for name in made:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# --8<-- [start:fleet]
import txqueue

registry = txqueue.Registry()


@registry.task(queue="shipping")
def ship(order: int, region: str) -> None:
    print(f"order {order} shipped from {region}")


app = txqueue.App(registry, databases={"eu": eu_url, "us": us_url}, amqp_url=None)
app.init()  # migrates each database and records its name there
registry.bind(app)

for region, url in (("eu", eu_url), ("us", us_url)):
    with psycopg.connect(url) as conn:  # the business write's database
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
        conn.execute("INSERT INTO orders VALUES (42)")
        ship.enqueue(conn, order=42, region=region)  # in the same transaction

fleet = app.fleet(concurrency=2)  # a worker per database, 2 threads each
fleet.run(burst=True)  # prints both lines, then returns
print(fleet.stats["succeeded"])  # 2
# --8<-- [end:fleet]
app.close()
assert fleet.stats["succeeded"] == 2
