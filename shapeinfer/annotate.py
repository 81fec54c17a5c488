"""``shapeinfer annotate``: write each bound variable's type as a trailing comment.

A codemod in LibCST's style: ``annotate_source`` returns a closed union of results
(``Annotated``, ``Unchanged``, ``Failed``) and never raises for a user's file. Only
trailing comments are touched; the new source must parse to the same AST, or nothing is
written. Our comments look like ``# x: float32[B, 64, H//2, W//2]`` (several names are
separated by ``; ``); a comment is recognised as ours when every name in it is bound on
that line, so re-running replaces them (idempotent) and stale ones are removed.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Optional, Union

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

_OURS = re.compile(r"(?:^|\s+)#\s(?P<body>[A-Za-z_]\w*: .+)$")
_ITEM = re.compile(r"^([A-Za-z_]\w*): ")


@dataclass(frozen=True)
class Annotated:
    source: str
    lines: int  # how many lines carry an annotation


@dataclass(frozen=True)
class Unchanged:
    source: str


@dataclass(frozen=True)
class Failed:
    reason: str


AnnotateResult = Union[Annotated, Unchanged, Failed]


def comment_for(items: list[tuple[str, str]]) -> str:
    return "# " + "; ".join(f"{name}: {text}" for name, text in items)


def _names_in(body: str) -> list[str]:
    return [m.group(1) for part in body.split("; ") if (m := _ITEM.match(part))]


def split_comment(comment: Optional[str], bound: set[str]) -> tuple[Optional[str], bool]:
    """(user part of a trailing comment, whether an annotation of ours was found)."""
    if not comment:
        return comment, False
    m = _OURS.search(comment)
    if m:
        names = _names_in(m.group("body"))
        if names and all(n in bound for n in names):
            user = comment[: m.start()].rstrip()
            return (user or None), True
    return comment, False


def _bound_names(node: cst.CSTNode) -> set[str]:
    """Names a statement (or a compound statement's header) binds."""
    names: set[str] = set()

    def targets(t):
        if isinstance(t, cst.Name):
            names.add(t.value)
        elif isinstance(t, (cst.Tuple, cst.List)):
            for el in t.elements:
                targets(el.value)
        elif isinstance(t, cst.StarredElement):
            targets(t.value)

    if isinstance(node, cst.SimpleStatementLine):
        for stmt in node.body:
            if isinstance(stmt, cst.Assign):
                for t in stmt.targets:
                    targets(t.target)
            elif isinstance(stmt, (cst.AnnAssign, cst.AugAssign)):
                targets(stmt.target)
    elif isinstance(node, (cst.For,)):
        targets(node.target)
    elif isinstance(node, cst.With):
        for item in node.items:
            if item.asname is not None:
                targets(item.asname.name)
    return names


class _Annotator(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, by_line: dict[int, list[tuple[str, str]]]):
        super().__init__()
        self.by_line = by_line
        self.count = 0

    def _new_comment(self, node, old: Optional[cst.Comment]) -> Optional[cst.Comment]:
        line = self.get_metadata(PositionProvider, node).start.line
        bound = _bound_names(node)
        user, _ = split_comment(old.value if old else None, bound)
        items = [(n, t) for n, t in self.by_line.get(line, []) if n in bound]
        if not items:
            return cst.Comment(user) if user else None
        self.count += 1
        ours = comment_for(items)
        return cst.Comment(f"{user}  {ours}" if user else ours)

    @staticmethod
    def _trailing(tw: cst.TrailingWhitespace, comment: Optional[cst.Comment]) -> cst.TrailingWhitespace:
        if comment is None:
            return tw.with_changes(comment=None, whitespace=cst.SimpleWhitespace(""))
        ws = tw.whitespace if tw.comment is not None and tw.whitespace.value else cst.SimpleWhitespace("  ")
        return tw.with_changes(comment=comment, whitespace=ws)

    def leave_SimpleStatementLine(self, original, updated):
        if not _bound_names(original) and original.trailing_whitespace.comment is None:
            return updated
        new = self._new_comment(original, updated.trailing_whitespace.comment)
        if new == updated.trailing_whitespace.comment:
            return updated
        return updated.with_changes(trailing_whitespace=self._trailing(updated.trailing_whitespace, new))

    def _header(self, original, updated):
        body = updated.body
        if not isinstance(body, cst.IndentedBlock):
            return updated
        new = self._new_comment(original, body.header.comment)
        if new == body.header.comment:
            return updated
        return updated.with_changes(body=body.with_changes(header=self._trailing(body.header, new)))

    def leave_For(self, original, updated):
        return self._header(original, updated)

    def leave_With(self, original, updated):
        return self._header(original, updated)


def annotate_source(source: str, by_line: dict[int, list[tuple[str, str]]]) -> AnnotateResult:
    """Rewrite the trailing comments of ``source`` for ``by_line`` (line -> [(name, type)])."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as e:
        return Failed(f"syntax error at line {e.raw_line}: {e.message}")
    annotator = _Annotator(by_line)
    try:
        new_module = MetadataWrapper(module).visit(annotator)
    except Exception as e:  # a LibCST limitation must not lose the user's file
        return Failed(f"rewriting failed: {type(e).__name__}: {e}")
    new = new_module.code
    if new == source:
        return Unchanged(source)
    try:
        same = ast.dump(ast.parse(source)) == ast.dump(ast.parse(new))
    except SyntaxError as e:
        return Failed(f"the annotated source does not parse ({e}); nothing written")
    if not same:
        return Failed("annotating would change the program; nothing written")
    return Annotated(new, annotator.count)


def unified_diff(path: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{path}", tofile=f"b/{path}"))


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: a crash leaves
    either the old file or the new one, never a torn one. Keeps the file's mode."""
    directory = os.path.dirname(os.path.abspath(path))
    mode = os.stat(path).st_mode if os.path.exists(path) else None
    fd, tmp = tempfile.mkstemp(prefix=".shapeinfer-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
