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

# The warm Spark for the DAG's dedup (Terraform's dedup_spark_connect): a Spark Connect server on
# the master only, on YARN, as a systemd service (restarted if it dies, started again on reboot).
ROLE=$(/usr/share/google/get_metadata_value attributes/dataproc-role || true)
CONNECT_PORT=$(/usr/share/google/get_metadata_value attributes/tidemark-spark-connect-port || true)
if [ "$ROLE" = "Master" ] && [ -n "$CONNECT_PORT" ]; then
  [[ "$CONNECT_PORT" =~ ^[0-9]+$ ]] || { echo "bad tidemark-spark-connect-port: $CONNECT_PORT" >&2; exit 1; }
  cat > /etc/systemd/system/tidemark-spark-connect.service <<UNIT
[Unit]
Description=tidemark: Spark Connect server for the DAG's dedup
After=hadoop-yarn-resourcemanager.service

[Service]
Environment=SPARK_HOME=/usr/lib/spark
ExecStart=/usr/lib/spark/sbin/start-connect-server.sh --wait --master yarn \
  --conf spark.connect.grpc.binding.port=${CONNECT_PORT} --conf spark.sql.session.timeZone=UTC \
  --conf spark.sql.shuffle.partitions=8 --conf spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS \
  --conf spark.sql.sources.partitionOverwriteMode=dynamic \
  --conf spark.connect.session.manager.defaultSessionTimeout=15m
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
UNIT
  systemctl daemon-reload
  systemctl enable --now tidemark-spark-connect.service
fi
