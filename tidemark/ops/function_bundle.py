"""The Cloud Function's deployable source folder (built by `tidemark function-bundle` and `tidemark up`).

A deployed function sees only its source folder (plus what requirements.txt installs), so the
bundle carries the tidemark modules the function imports, at the same import paths as in the repo:

    <out>/main.py                     cloud_function/main.py (the entry point: on_notice)
    <out>/requirements.txt            cloud_function/requirements.txt
    <out>/cloud_function/             the REST client and the Cloud Logging setup
    <out>/tidemark/                   base.layout, base.names, notices.availability_notice,
                                      orchestration.airflow_api, orchestration.runs +
                                      schemas/availability_notice.schema.json

The folder is built next to <out> and swapped in, then checked: a clean Python with only the
bundle on its path imports main and must load no first-party module from outside the bundle.
Terraform archives <out> (build/cloud_function by default).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (source relative to the repo, destination relative to the bundle)
FILES = [
    ("cloud_function/main.py", "main.py"),
    ("cloud_function/requirements.txt", "requirements.txt"),
    ("cloud_function/__init__.py", "cloud_function/__init__.py"),
    ("tidemark/orchestration/airflow_api.py", "tidemark/orchestration/airflow_api.py"),
    ("cloud_function/cloud_logging.py", "cloud_function/cloud_logging.py"),
    ("cloud_function/dead_letter.py", "cloud_function/dead_letter.py"),
    ("tidemark/__init__.py", "tidemark/__init__.py"),
    ("tidemark/base/__init__.py", "tidemark/base/__init__.py"),
    ("tidemark/notices/__init__.py", "tidemark/notices/__init__.py"),
    ("tidemark/orchestration/__init__.py", "tidemark/orchestration/__init__.py"),
    ("tidemark/notices/availability_notice.py", "tidemark/notices/availability_notice.py"),
    ("tidemark/base/layout.py", "tidemark/base/layout.py"),
    ("tidemark/base/names.py", "tidemark/base/names.py"),
    ("tidemark/orchestration/runs.py", "tidemark/orchestration/runs.py"),
    ("tidemark/schemas/availability_notice.schema.json", "tidemark/schemas/availability_notice.schema.json"),
]
FIRST_PARTY = ("tidemark", "cloud_function", "streaming_job", "dedup_sql", "main")

# Run in the bundle by a fresh interpreter: which first-party modules did `import main` load, and
# from where?
_PROBE = f"""
import json, sys
import main
print(json.dumps({{n: getattr(m, "__file__", None) for n, m in sys.modules.items()
                  if n.split(".")[0] in {FIRST_PARTY!r}}}))
"""


def build(out: str) -> str:
    """Build the bundle at `out` (staged beside it, then swapped in); returns its absolute path."""
    out = os.path.abspath(out)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".bundle-", dir=parent)
    for source, dest in FILES:
        target = os.path.join(staging, dest)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(ROOT, source), target)
    old = None
    if os.path.exists(out):
        old = tempfile.mkdtemp(prefix=".bundle-old-", dir=parent)
        os.rename(out, os.path.join(old, "x"))
    os.rename(staging, out)
    if old:
        shutil.rmtree(old)
    return out


def check(out: str, python: str = sys.executable) -> dict[str, str | None]:
    """Import main.py from the bundle in a fresh interpreter.

    Raises unless every first-party module came from the bundle. Returns {module: file} (None for a
    module without a file, such as a namespace package).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = out
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # leave the bundle exactly as built
    env.setdefault("AIRFLOW_BASE_URL", "http://127.0.0.1:9")  # read lazily; never contacted
    proc = subprocess.run([python, "-c", _PROBE], cwd=out, env=env, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"the bundle in {out} does not import:\n{proc.stderr[-2000:]}")
    loaded: dict[str, str | None] = json.loads(proc.stdout.strip().splitlines()[-1])
    outside = {n: f for n, f in loaded.items() if f is not None and not os.path.abspath(f).startswith(out + os.sep)}
    if outside:
        raise RuntimeError(f"the bundle imports first-party modules from outside {out}: {outside}")
    return loaded
