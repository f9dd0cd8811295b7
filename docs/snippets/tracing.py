"""How-to "Tracing": OpenTelemetry's SDK set up as an application would, then one task
enqueued in a span and run, its attempt's span a child of its enqueue's, and linked to it."""

import sqlite3
from contextlib import closing

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import txqueue

# --8<-- [start:setup]
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

provider = TracerProvider()  # with your exporter: OTLP, Jaeger, ...
provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
trace.set_tracer_provider(provider)
# --8<-- [end:setup]

spans = InMemorySpanExporter()  # what the check below reads
provider.add_span_processor(BatchSpanProcessor(spans))
registry = txqueue.Registry()


@registry.task(queue="images")
def resize(image: int) -> None:
    pass


app = txqueue.App(registry, database_url="sqlite:///traced.db", amqp_url=None)
app.init()
tracer = trace.get_tracer("shop")
# --8<-- [start:request]
with tracer.start_as_current_span("POST /images"):  # your request's span
    with closing(sqlite3.connect("traced.db")) as conn, txqueue.transaction(conn):
        resize.options(app=app).enqueue(conn, image=7)  # in a span "send images"
app.worker().run(burst=True)  # its attempt in a span "process images", the same trace
# --8<-- [end:request]

provider.force_flush()
by_name = {s.name: s for s in spans.get_finished_spans()}
request, send, process = by_name["POST /images"], by_name["send images"], by_name["process images"]
assert send.parent is not None and send.parent.span_id == request.context.span_id
assert process.parent is not None and process.parent.span_id == send.context.span_id
assert [link.context.span_id for link in process.links] == [send.context.span_id]
assert process.attributes is not None and process.attributes["txqueue.task.outcome"] == "succeeded"
