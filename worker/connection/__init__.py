"""What keeps the worker connected to the database: the pool and the retry rule (database), the leases
of the jobs it holds (heartbeat), the LISTEN wake-up (listener) and its row in the workers table
(presence)."""
