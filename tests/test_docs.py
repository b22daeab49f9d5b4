"""The prose names what the code has: repository paths the docs and docstrings mention exist, the
Airflow diagrams show every task of the dedup DAG, and the LICENSE is the one setup.cfg declares.

Static checks only (no Airflow, no Spark): they read the files.
"""

from __future__ import annotations

import ast
import configparser
import glob
import hashlib
import os
import re
from pathlib import Path

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A repository path as prose writes it: `tidemark/iceberg/commits.py`, `tidemark/base/{layout,names}.py`,
# `terraform/scripts/install-tidemark.sh`. Not a part of a longer path or URL (gs://b/dags/x.py,
# build/cloud_function/main.py) and not a template (`{pkg}/x.py` has no first-party prefix).
FIRST_PARTY_DIRS = (
    "tidemark",
    "streaming_job",
    "cloud_function",
    "dags",
    "dedup_sql",
    "scripts",
    "terraform",
    "bench",
    "tests",
)
PATH_MENTION = re.compile(
    r"(?<![\w./{}$-])((?:" + "|".join(FIRST_PARTY_DIRS) + r")/[\w./{},-]*?\.(?:py|sql|tf|sh|json|md|txt|cfg))(?!\w)"
)


def _expand(path: str) -> list[str]:
    """tidemark/{a,b}.py -> [tidemark/a.py, tidemark/b.py] (brace alternatives, nested too)."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    return [
        out for alt in match.group(1).split(",") for out in _expand(path[: match.start()] + alt + path[match.end() :])
    ]


def _prose_files() -> list[str]:
    """Every Markdown file of the repository, and the code whose docstrings describe the system."""
    found = set(glob.glob(os.path.join(ROOT, "*.md")))
    for folder in ("docs", "cloud_function", "bench", "terraform"):
        found |= set(glob.glob(os.path.join(ROOT, folder, "**", "*.md"), recursive=True))
    for folder in ("dags", "cloud_function", "tidemark"):
        found |= set(glob.glob(os.path.join(ROOT, folder, "**", "*.py"), recursive=True))
    return sorted(path for path in found if "__pycache__" not in path)


def _missing_paths(text: str) -> list[str]:
    return sorted(
        {
            path
            for match in PATH_MENTION.finditer(text)
            for path in _expand(match.group(1))
            if not os.path.exists(os.path.join(ROOT, path))
        }
    )


def test_the_path_check_sees_what_it_must():
    assert _missing_paths("tidemark/base/{notice,layout}.py") == ["tidemark/base/notice.py"]
    assert _missing_paths("see `tidemark/iceberg/commits.py` and tidemark/notices/corrected_delivery.py") == []
    assert _missing_paths("gs://bucket/dags/gone.py, build/cloud_function/gone.py") == []


@pytest.mark.parametrize("path", [os.path.relpath(p, ROOT) for p in _prose_files()])
def test_every_repository_path_the_prose_names_exists(path):
    missing = _missing_paths(Path(os.path.join(ROOT, path)).read_text(encoding="utf-8"))
    assert not missing, f"{path} names files the repository does not have: {missing}"


def test_lake_files_the_docs_name_are_ones_the_code_writes():
    """A lake file name such as `_tidemark_run.json` in the docs or a DAG's docstring is one the
    code still uses (a removed `_CURRENT.json` would not be)."""
    code = "\n".join(
        Path(p).read_text(encoding="utf-8")
        for folder in ("tidemark", "streaming_job", "cloud_function")
        for p in glob.glob(os.path.join(ROOT, folder, "**", "*.py"), recursive=True)
    )
    texts = {os.path.relpath(p, ROOT): Path(p).read_text(encoding="utf-8") for p in _prose_files() if p.endswith(".md")}
    for p in glob.glob(os.path.join(ROOT, "dags", "*.py")):
        texts[os.path.relpath(p, ROOT)] = ast.get_docstring(ast.parse(Path(p).read_text())) or ""
    stale = {
        path: names
        for path, text in texts.items()
        if (
            names := sorted(
                n for n in set(re.findall(r"(?<![\w./-])(_[A-Za-z][A-Za-z_]*\.json)\b", text)) if n not in code
            )
        )
    }
    assert not stale, f"docs name lake files no code writes or reads: {stale}"


# -- the dedup DAG's tasks in the diagrams ---------------------------------------------------------


def _dedup_dag_tasks() -> set[str]:
    """Task ids of dags/tidemark_dedup.py: @task-decorated functions and task_id="..." literals."""
    tree = ast.parse(Path(os.path.join(ROOT, "dags", "tidemark_dedup.py")).read_text())
    tasks = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(
            ast.unparse(d).split("(")[0].split(".")[0] == "task" for d in node.decorator_list
        ):
            tasks.add(node.name)
        if isinstance(node, ast.keyword) and node.arg == "task_id" and isinstance(node.value, ast.Constant):
            tasks.add(node.value.value)
    return tasks


def test_the_dag_task_list_is_found():
    assert {"dedup", "publish", "trigger_affected", "notify_corrected"} <= _dedup_dag_tasks()


def test_the_airflow_docs_diagram_shows_every_task_of_the_dedup_dag():
    text = Path(os.path.join(ROOT, "docs", "airflow.md")).read_text()
    diagram = text.split("```", 2)[1]  # the first fenced block: notice -> run -> tasks
    missing = sorted(task for task in _dedup_dag_tasks() if not re.search(rf"\b{task}\b", diagram))
    assert not missing, f"docs/airflow.md's diagram lacks {missing}"


def test_the_dags_docstring_diagram_shows_every_task():
    doc = ast.get_docstring(ast.parse(Path(os.path.join(ROOT, "dags", "tidemark_dedup.py")).read_text()))
    missing = sorted(task for task in _dedup_dag_tasks() if not re.search(rf"\b{task}\b", doc))
    assert not missing, f"dags/tidemark_dedup.py's docstring lacks {missing}"


# -- the license -----------------------------------------------------------------------------------

# SHA-256 of https://www.apache.org/licenses/LICENSE-2.0.txt as distributed, unchanged.
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_license_file_is_the_apache_2_0_text_setup_cfg_declares():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    assert config["metadata"]["license"] == "Apache-2.0"
    files = config["metadata"]["license_files"].split()
    assert files == ["LICENSE"]
    data = Path(os.path.join(ROOT, "LICENSE")).read_bytes()
    assert b"Apache License\n                           Version 2.0, January 2004" in data
    assert hashlib.sha256(data).hexdigest() == APACHE_2_0_SHA256, "LICENSE is not the verbatim Apache 2.0 text"


# -- docs/consumers.md: its pyiceberg and DuckDB snippets run ---------------------------------------


def test_the_consumer_guides_snippets_run_against_a_lake(tmp_path):
    """Every ```python block of docs/consumers.md, in order, in one namespace, on a lake with two
    versions of a date and their changesets (tests/changeskit.py: no Spark)."""
    from tests import changeskit
    from tests.icebergkit import commit_recording, receipt
    from tidemark.notices import corrected_delivery
    from tidemark.store.lake import Lake

    lake = Lake.open(str(tmp_path / "lake"))
    v1 = commit_recording(
        lake, changeskit.prepared_with_changes(lake, [receipt(1)], {"1-a": (5, 1), "2-a": (9, 2)}, None)
    ).current
    v2 = commit_recording(
        lake,
        changeskit.prepared_with_changes(lake, [receipt(1), receipt(2)], {"1-a": (7, 2), "3-a": (3, 1)}, v1),
    ).current
    (notice,) = [e["notice"] for e in corrected_delivery.outbox(lake).owed() if e["notice"]["version"] == v2.version]
    text = Path(os.path.join(ROOT, "docs", "consumers.md")).read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 2
    scope = {"lake_path": str(tmp_path / "lake"), "event_date": "2026-03-10", "notice": notice}
    for block in blocks:
        exec(compile(block, "docs/consumers.md", "exec"), scope)
    # what the snippets computed: the version (2 sessions), its changeset (u1 updated, u2 deleted, u3
    # inserted), the same rows by value, and DuckDB's per-user sums
    assert scope["version"].num_rows == 2
    assert sorted(scope["changeset"]["_change_type"].to_pylist()) == [
        "delete",
        "insert",
        "update_postimage",
        "update_preimage",
    ]
    assert scope["later"].num_rows == scope["changeset"].num_rows
    assert scope["per_user"] == [("u1", 0, 2.0), ("u2", -1, -9.0), ("u3", 1, 3.0)]
