"""A job's way through the worker: its slot (slots), its claim (claimer), its handler (executor) and its
result (recorder)."""
