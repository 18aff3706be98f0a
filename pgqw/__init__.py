"""pg-queue-worker: a job queue whose state machine lives in PostgreSQL stored functions."""
