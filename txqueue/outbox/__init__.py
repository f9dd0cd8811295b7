"""The transactional outbox: a task's row written in the caller's transaction, and its
wake-up sent once that commits (by RabbitMQ, by PostgreSQL's NOTIFY, or in process)."""
