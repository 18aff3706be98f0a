"""The lab: real processes and servers to break the queue on purpose (the break-it scenarios, the
chaos soak, a PostgreSQL server a test owns). It lives in the repository, not in the installed
package; `pgqw soak` and `pgqw evidence` load it from a checkout."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
