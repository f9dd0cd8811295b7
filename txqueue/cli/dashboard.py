"""``txqueue dashboard``."""

from __future__ import annotations

from typing import Annotated

import typer

from .. import config, redaction
from ..errors import ConfigError
from .app import AmqpUrl, Databases, DatabaseUrl, app, env_option, err, friendly, targets

TOKEN_ENV = "TXQUEUE_DASHBOARD_TOKEN"


@app.command()
@friendly
def dashboard(
    host: Annotated[
        str, typer.Option(help="The address to listen on. Any but loopback needs --token.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535)] = 8080,
    token: Annotated[
        str | None,
        env_option(
            "--token",
            TOKEN_ENV,
            "Every request must carry it: open the dashboard once as /?token=…",
        ),
    ] = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Show everything, offer no action.")
    ] = False,
    database_url: DatabaseUrl = None,
    databases: Databases = None,
    amqp_url: AmqpUrl = None,
) -> None:
    """Serve the web dashboard: queues, tasks, workers; retry and cancel. Of several
    databases, every one: a first page of each, and each one's pages under /db/NAME/."""
    from .. import dashboard as web  # the dashboard extra, imported only here

    if token is None and not web.loopback(host):
        raise ConfigError(
            f"--host {host} is reachable from other machines: give an access token "
            f"(--token or {TOKEN_ENV}), or listen on 127.0.0.1"
        )
    served = targets(database_url, databases)
    broker = config.amqp_url(amqp_url)
    if len(served) == 1:
        [(name, url)] = served.items()
        application = web.create_app(url, read_only=read_only, token=token, amqp_url=broker)
        shown = redaction.redact(url) if name is None else f"database {name}"
    else:
        each = {str(name): url for name, url in served.items()}
        application = web.create_app(
            databases=each, read_only=read_only, token=token, amqp_url=broker
        )
        shown = f"databases {', '.join(each)}"
    sock = web.listen(host, port)
    mode = " (read-only)" if read_only else ""
    err.print(
        f"txqueue dashboard{mode} on http://{host}:{port}/ for {shown}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    web.serve(application, sock)
