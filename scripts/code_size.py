"""Issue #29's product budget: lines and prose (docstring and comment lines) per file and in all.
``python scripts/code_size.py [root]``."""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

PRODUCT = Path(__file__).resolve().parents[1] / "python" / "sglang_specinit"


def _share(lines: int, prose: int) -> str:
    return f"{prose / lines if lines else 0.0:5.1%}"


def file_size(path: Path) -> tuple[int, int]:
    """A file's lines (as ``wc -l`` counts them) and its prose lines: docstring lines plus
    lines holding only a comment."""
    text = path.read_text()
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        if isinstance(node, kinds) and ast.get_docstring(node, clean=False) is not None:
            docstrings.update(range(node.body[0].lineno, node.body[0].end_lineno + 1))
    prose = set(docstrings)
    code_lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            prose.add(token.start[0])
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                                tokenize.DEDENT, tokenize.ENDMARKER):
            code_lines.update(range(token.start[0], token.end[0] + 1))
    # A line with code and a trailing comment is code.
    prose -= code_lines - docstrings
    return text.count("\n"), len(prose)


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else PRODUCT
    per_file = sorted(((file_size(p), p) for p in root.rglob("*.py")), key=lambda x: -x[0][0])
    for (lines, prose), path in per_file[:40]:
        print(f"{prose:5d} / {lines:5d}  {_share(lines, prose)}  {path.relative_to(root)}")
    lines, prose = (sum(size[i] for size, _ in per_file) for i in (0, 1))
    print(f"total: {lines} lines, {prose} prose ({_share(lines, prose).strip()})")
