"""Writes the docs' settings tables from their declaration in pgqw/config.py.

    .venv/bin/python docs/tools/make_settings_doc.py          # rewrite the tables
    .venv/bin/python docs/tools/make_settings_doc.py --check  # exit 1 when a table is not what it would write

A table sits between `<!-- settings:begin NAME -->` and `<!-- settings:end -->`, NAME being one of
pgqw.config's tables (OPERATING, RETENTION, WORKER, API) or the demo's (pgqw.demo.settings: DEMO); its rows
are the settings that list it, in declaration order, each under its PGQW_ name with its alias beside it.
Everything outside the markers is the docs' own.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pgqw import config  # noqa: E402
from pgqw.demo import settings as demo_settings  # noqa: E402

DOCS = (ROOT / "docs" / "operating.md", ROOT / "docs" / "worker.md", ROOT / "docs" / "demo.md",
        ROOT / "docs" / "api.md")
# Each declaration (a dataclass whose fields are settings) with its settings: the queue's, the demo's.
DECLARED = ((config.Settings, config.SETTINGS), (demo_settings.DemoSettings, demo_settings.SETTINGS))
SETTINGS = tuple(s for _, found in DECLARED for s in found)
BLOCK = re.compile(r"(<!-- settings:begin (\w+) -->\n)(.*?)(<!-- settings:end -->)", re.S)
COMMAND = "python docs/tools/make_settings_doc.py"


def shown(setting: config.Setting) -> str:
    """The default column: the declaration's words for it, else the default itself."""
    if setting.shown is not None:
        return setting.shown
    assert setting.field is not None, setting.env
    declaration = next(cls for cls, found in DECLARED if setting in found)
    default = config._default(declaration.__dataclass_fields__[setting.field])
    if isinstance(default, bool):
        return f"`{int(default)}`"
    if isinstance(default, (int, float)):
        return str(default)
    if isinstance(default, tuple):
        return ", ".join(f"`{d}`" for d in default) or "none"
    if isinstance(default, str):
        return f"`{default}`"
    raise ValueError(f"{setting.env}: give it shown=, its default ({default!r}) has no words")


def variable(setting: config.Setting) -> str:
    """The variable column: its PGQW_ name, then its aliases (the names it is still read under)."""
    aliases = " ".join(f"(or `{a}`)" for a in setting.aliases)
    return f"`{setting.env}` {aliases}".rstrip()


def table(name: str) -> str:
    rows = [s for s in SETTINGS if name in s.tables]
    if not rows:
        raise ValueError(f"no setting lists the table {name!r}")
    lines = ["| variable | default | what it sets |", "|---|---|---|"]
    lines += [f"| {variable(s)} | {shown(s)} | {s.doc} |" for s in rows]
    return "\n".join(lines) + "\n"


def render(text: str) -> str:
    """The document with each table between markers rewritten."""
    return BLOCK.sub(lambda m: m.group(1) + table(m.group(2)) + m.group(4), text)


def stale() -> list[Path]:
    """The docs whose tables are not what this would write."""
    return [p for p in DOCS if render(p.read_text()) != p.read_text()]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        out = stale()
        for p in out:
            print(f"{p.relative_to(ROOT)}: settings tables are stale; run {COMMAND}", file=sys.stderr)
        return 1 if out else 0
    for p in DOCS:
        text = p.read_text()
        if render(text) != text:
            p.write_text(render(text))
            print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
