"""Below the adapters an event date travels as a `datetime.date`: no annotation types one as text.

Text enters at the adapters (a CLI option, a DAG param, a notice, a marker, a partition folder's
name) and is parsed there once (tidemark.base.layout.as_event_date); it leaves once, formatted by
layout.event_date_text, in a path, JSON or SQL. This test reads the annotations of every module
below the adapters (the standard library's ast: nothing is imported) and names each parameter,
field or return that holds a date as text, or as "a date or text".
"""

from __future__ import annotations

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Below the adapters: the library but its CLI commands, and the stream's modules (the CLI parses
# the stream's options). The DAGs and the function are adapters: text comes in there.
CHECKED = ("tidemark", "streaming_job")
ADAPTERS = ("tidemark/commands/", "tidemark/cli.py")
# Where dates enter and leave as text: the parse and the one text form (and the formats' module).
BOUNDARY_MODULES = ("tidemark/base/layout.py",)
# Names that hold an event date (or a day, or several): `event_date`, `dates`, `into`, `day`, ...
DATE_NAME = re.compile(r"(^|_)(event_)?dates?($|_)|(^|_)days?$|^into$|^since_day$")
# Functions whose job is the text form of a date (formatting where it leaves: a path, SQL, JSON).
TEXT_FORM = re.compile(r"(_text|_literal|_sql|_part|_label|_key)$")
TEXT = re.compile(r"\bstr\b")
DATE_OR_TEXT = re.compile(r"\bdate\s*\|\s*str\b|\bstr\s*\|\s*date\b")


def checked_files() -> list[str]:
    """The Python files below the adapters, relative to the repository."""
    found = []
    for package in CHECKED:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                relative = os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/")
                if name.endswith(".py") and not relative.startswith(ADAPTERS) and relative not in BOUNDARY_MODULES:
                    found.append(relative)
    return sorted(found)


def date_text_annotations(relative: str) -> list[str]:
    """`file:line name: annotation` for each annotation that holds a date as text."""
    with open(os.path.join(ROOT, relative), encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), relative)
    found = []

    def check(name: str, annotation: ast.expr | None, line: int) -> None:
        if annotation is None:
            return
        text = ast.unparse(annotation)
        if DATE_OR_TEXT.search(text) or (DATE_NAME.search(name) and TEXT.search(text)):
            found.append(f"{relative}:{line} {name}: {text}")

    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                check(argument.arg, argument.annotation, argument.lineno)
            if not TEXT_FORM.search(node.name):
                check(node.name + "()", node.returns, node.lineno)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            check(node.target.id, node.annotation, node.lineno)
    return found


def test_the_rule_sees_a_date_held_as_text(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from datetime import date\n"
        "def plan(event_date: str, day: date) -> None: ...\n"
        "def dates_of(folder: str) -> list[str]: ...\n"
        "def either(value: date | str) -> date: ...\n"
        "def event_date_text(value: date) -> str: ...\n"
        "class Plan:\n"
        "    event_date: str\n"
        "    hi: date\n"
    )
    relative = os.path.relpath(sample, ROOT)
    found = [line.split(" ", 1)[1] for line in date_text_annotations(relative)]
    assert found == ["event_date: str", "dates_of(): list[str]", "value: date | str", "event_date: str"]


def test_no_event_date_is_text_below_the_adapters():
    found = [line for relative in checked_files() for line in date_text_annotations(relative)]
    assert not found, "dates held as text below the adapters (parse at the boundary):\n" + "\n".join(found)
