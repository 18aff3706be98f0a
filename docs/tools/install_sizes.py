"""Measures what each install of the package weighs: the base install and each extra.

    .venv/bin/python docs/tools/install_sizes.py [--wheel dist/pg_queue_worker-*.whl] [--out FILE]

Builds the wheel from this checkout (python -m build --wheel) unless one is given, then for each
variant (base, [api], [embedded], [demo], [all]) makes a fresh virtual environment without pip,
installs the wheel with that variant's extras into it (this interpreter's pip, `pip --python`, so pip
itself is not counted; byte-compiled as pip does by default) and reports `du -sk` of its
site-packages, the largest distributions and what the variant adds to the base. docs/operating.md's
table and docs/evidence/install-sizes.txt come from this.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = [("base", ""), ("api", "api"), ("embedded", "embedded"), ("demo", "demo"), ("all", "all")]


def _run(args: list[str], **kw: object) -> str:
    done = subprocess.run(args, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if done.returncode != 0:
        sys.exit(f"install_sizes: {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def _du_kib(path: Path) -> int:
    return int(_run(["du", "-sk", str(path)]).split()[0])


def _mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def _distributions(site: Path) -> dict[str, int]:
    """Each installed distribution's name and the KiB of the files its RECORD lists (pip records the
    byte-code it writes there too)."""
    sizes: dict[str, int] = {}
    for info in sorted(site.glob("*.dist-info")):
        name = re.sub(r"-[^-]+\.dist-info$", "", info.name)
        files = (site / line.rsplit(",", 2)[0] for line in (info / "RECORD").read_text().splitlines() if line)
        sizes[name] = sum(f.stat().st_size for f in files if f.is_file()) // 1024
    return sizes


def build_wheel(out: Path) -> Path:
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)], cwd=out)
    return next(out.glob("*.whl"))


def measure(wheel: Path, work: Path) -> list[tuple[str, int, dict[str, int]]]:
    results = []
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # byte-compile as users get it
    for name, extra in VARIANTS:
        venv = work / f"venv-{name}"
        _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
        target = f"{wheel}[{extra}]" if extra else str(wheel)
        _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
              "--no-cache-dir", target], env=env)
        site = next((venv / "lib").glob("python3*/site-packages"))
        results.append((name, _du_kib(site), _distributions(site)))
    return results


def report(results: list[tuple[str, int, dict[str, int]]], wheel: Path) -> str:
    base = dict(results[0][2])
    lines = [
        "Installed size of pg-queue-worker, per variant: du -sk of a fresh venv's site-packages (no pip in it).",
        "$ .venv/bin/python docs/tools/install_sizes.py --out docs/evidence/install-sizes.txt",
        f"wheel: {wheel.name} ({wheel.stat().st_size // 1024} KiB); Python {platform.python_version()} on "
        f"{platform.machine()} {platform.system()}",
        "",
        f"{'variant':<10} {'site-packages':>14} {'over base':>10}  distributions",
    ]
    base_kib = results[0][1]
    for name, kib, dists in results:
        over = "" if name == "base" else f"+{_mib(kib - base_kib)}"
        label = "base" if name == "base" else f"[{name}]"
        lines.append(f"{label:<10} {_mib(kib):>14} {over:>10}  {len(dists)}")
    lines += ["", "base: every distribution (KiB of its files and byte-code)"]
    lines += [f"  {n:<28} {k:>8}" for n, k in sorted(base.items(), key=lambda x: -x[1])]
    for name, _kib, dists in results[1:]:
        added = {n: k for n, k in dists.items() if n not in base}
        lines += ["", f"[{name}] adds: " + (", ".join(f"{n} {k} KiB" for n, k in
                                                    sorted(added.items(), key=lambda x: -x[1])) or "nothing")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, help="a built wheel (default: build one from this checkout)")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pgqw-sizes-") as tmp:
        work = Path(tmp)
        wheel = args.wheel.resolve() if args.wheel else build_wheel(work)
        text = report(measure(wheel, work), wheel)
    sys.stdout.write(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
