"""What an application or an operator does to tasks already enqueued, on its own
connection: look up, list, wait for, retry and cancel one; search, retry, cancel and delete
many by a filter; pause, resume and limit a queue."""
