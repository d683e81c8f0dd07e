"""No function takes more than six arguments by position: past that, a call is a row of values whose meaning
is their order (``Generator._generate`` once took nine). Parameters after ``*`` (keyword-only) are named at
every call and do not count, nor does a method's ``self`` or ``cls``. Triton kernels are exempt: a launch
passes their pointers, strides and block sizes by position, as Triton compiles them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import REPO

LIMIT = 6


def _is_triton_kernel(node: ast.FunctionDef) -> bool:
    """Decorated ``@triton.jit`` or ``@triton.jit(...)`` (options such as ``do_not_specialize``)."""
    jits = (d.func if isinstance(d, ast.Call) else d for d in node.decorator_list)
    return any(isinstance(d, ast.Attribute) and d.attr == "jit" and isinstance(d.value, ast.Name) and d.value.id == "triton"
               for d in jits)


def _positional(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    names = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
    return names[1:] if names[:1] in (["self"], ["cls"]) else names


def long_signatures(folder: Path) -> list[str]:
    """Every function under ``folder`` taking more than ``LIMIT`` arguments by position, as
    ``path:line name(n)`` (the path from ``folder``'s parent)."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_triton_kernel(node):
                count = len(_positional(node))
                if count > LIMIT:
                    found.append(f"{path.relative_to(folder.parent)}:{node.lineno} {node.name}({count})")
    return found


def test_the_check_sees_a_long_signature(tmp_path):
    """A guard for the checks below: seven positional parameters are found, keyword-only ones and ``self``
    are not counted, a Triton kernel is left alone."""
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "m.py").write_text(
        "import triton\n"
        "def seven(a, b, c, d, e, f, g): pass\n"
        "def six_and_named(a, b, c, d, e, f, *, g): pass\n"
        "class C:\n    def method(self, a, b, c, d, e, f): pass\n"
        "@triton.jit\ndef kernel(a, b, c, d, e, f, g, h): pass\n"
        "@triton.jit(do_not_specialize=['h'])\ndef options(a, b, c, d, e, f, g, h): pass\n"
        "@other.jit(x=1)\ndef not_triton(a, b, c, d, e, f, g): pass\n"
    )
    assert long_signatures(folder) == ["pkg/m.py:2 seven(7)", "pkg/m.py:11 not_triton(7)"]


@pytest.mark.parametrize("folder", ["kvprune", "presses", "harness"])
def test_no_function_takes_more_than_six_arguments_by_position(folder):
    found = long_signatures(REPO / folder)
    assert not found, (f"functions under {folder}/ taking more than {LIMIT} arguments by position (name them: a "
                       "dataclass, or keyword-only parameters after *):\n  " + "\n  ".join(found))
