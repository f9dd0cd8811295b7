"""``txqueue dashboard``."""

from __future__ import annotations

from typing import Annotated

import typer

from .. import config
from ..errors import ConfigError
from .app import AmqpUrl, DatabaseUrl, app, env_option, err, friendly

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
    amqp_url: AmqpUrl = None,
) -> None:
    """Serve the web dashboard: queues, tasks, workers; retry and cancel."""
    from .. import dashboard as web  # the dashboard extra, imported only here

    if token is None and not web.loopback(host):
        raise ConfigError(
            f"--host {host} is reachable from other machines: give an access token "
            f"(--token or {TOKEN_ENV}), or listen on 127.0.0.1"
        )
    url = config.database_url(database_url)
    application = web.create_app(
        url, read_only=read_only, token=token, amqp_url=config.amqp_url(amqp_url)
    )
    sock = web.listen(host, port)
    mode = " (read-only)" if read_only else ""
    err.print(
        f"txqueue dashboard{mode} on http://{host}:{port}/ for {config.redact(url)}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    web.serve(application, sock)
