"""What txqueue tells the outside: Prometheus metrics and ``/healthz``, OpenTelemetry
spans, logs that name their task, error trackers told of failures, the hooks a worker reports
through, and the vacuum horizon read."""
