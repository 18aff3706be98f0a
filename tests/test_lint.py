"""The project's linters, as CI runs them: ruff on the tree and mypy on the library (as it installs:
app/ and worker/ as pgqw.app and pgqw.worker) and on a user-style module that uses the public API; a
module passing options of the wrong type is refused, so the types really reach a user's code."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _mapped_tree(tmp: Path) -> Path:
    """The installed layout, made of links into the checkout: pgqw/, with app/ and worker/ inside it."""
    package = tmp / "src" / "pgqw"
    package.mkdir(parents=True)
    for entry in (ROOT / "pgqw").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "app").symlink_to(ROOT / "app")
    (package / "worker").symlink_to(ROOT / "worker")
    return tmp / "src"


def _mypy(tmp: Path, *targets: str) -> subprocess.CompletedProcess[str]:
    src = tmp / "src" if (tmp / "src").exists() else _mapped_tree(tmp)
    return subprocess.run([str(BIN / "mypy"), "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(tmp / "cache"), *targets],
                          cwd=tmp, env={"MYPYPATH": str(src), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=600)


def test_lint_ruff_finds_nothing() -> None:
    done = subprocess.run([str(BIN / "ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_lint_mypy_library_and_a_users_module_are_clean(tmp_path: Path) -> None:
    library = _mypy(tmp_path, "-p", "pgqw")
    assert library.returncode == 0, library.stdout + library.stderr
    user = _mypy(tmp_path, str(ROOT / "tests" / "typing" / "shop.py"))
    assert user.returncode == 0, user.stdout + user.stderr


def test_lint_mypy_refuses_enqueue_options_of_the_wrong_type(tmp_path: Path) -> None:
    done = _mypy(tmp_path, str(ROOT / "tests" / "typing" / "wrong_options.py"))
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert [int(e.split(":")[1]) for e in errors] == [15, 16, 17], done.stdout
