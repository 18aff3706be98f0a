"""What every worker does for the queue as a whole, besides its own jobs: periodic jobs (scheduler),
recovering other workers' expired leases (sweeper), deleting finished jobs past their retention (pruner)."""
