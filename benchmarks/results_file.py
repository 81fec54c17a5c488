"""benchmarks/RESULTS.md, one section per benchmark: a rerun replaces its own section."""

from __future__ import annotations

from pathlib import Path

PATH = Path(__file__).resolve().parent / "RESULTS.md"


def replace_section(heading: str, text: str) -> None:
    """Put ``text`` (a whole section, its "## " heading included) where the section whose
    heading starts with ``heading`` is, or at the end if there is none."""
    old = PATH.read_text() if PATH.exists() else "# Benchmark results\n"
    start = old.find(heading)
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        end = old.find("\n## ", start + 1)
        new = old[:start] + text + ("" if end < 0 else old[end:])
    PATH.write_text(new.rstrip("\n") + "\n")


def emit(heading: str, text: str, write: bool) -> None:
    """Print a benchmark's section; with ``write`` (its ``--write``), put it in RESULTS.md."""
    print(text)
    if write:
        replace_section(heading, text)
