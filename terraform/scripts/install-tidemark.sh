#!/usr/bin/env bash
# Dataproc initialization action: install the tidemark wheel into the Python that PySpark uses,
# on every node (the driver imports tidemark; executors need its pure-Python helpers).
#
# The wheel's own dependencies are installed EXCEPT pyspark: the image's Spark provides it, and a
# pip pyspark would shadow the cluster's Spark (different jars, no GCS connector).
# Metadata: tidemark-wheel = gs://.../tidemark-<version>-py3-none-any.whl
set -euo pipefail

WHEEL_URI=$(/usr/share/google/get_metadata_value attributes/tidemark-wheel)
PYTHON=/opt/conda/default/bin/python
[ -x "$PYTHON" ] || PYTHON=$(command -v python3)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

gcloud storage cp "$WHEEL_URI" "$WORK/" 2>/dev/null || gsutil cp "$WHEEL_URI" "$WORK/"
WHEEL=$(ls "$WORK"/*.whl)

# Requirements of the wheel (not its extras), pyspark left out.
"$PYTHON" - "$WHEEL" > "$WORK/requirements.txt" <<'PY'
import re
import sys
import zipfile

with zipfile.ZipFile(sys.argv[1]) as wheel:
    metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    for line in wheel.read(metadata).decode("utf-8").splitlines():
        if line.startswith("Requires-Dist:") and "extra ==" not in line:
            requirement = line.split(":", 1)[1].strip()
            if not re.match(r"pyspark\b", requirement, re.IGNORECASE):
                print(requirement)
PY

"$PYTHON" -m pip install --quiet --no-deps "$WHEEL"
"$PYTHON" -m pip install --quiet -r "$WORK/requirements.txt"
"$PYTHON" -c "import tidemark, streaming_job, dedup_sql; print('tidemark', tidemark.__version__)"
