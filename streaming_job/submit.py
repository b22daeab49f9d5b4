"""spark-submit entry point: `spark-submit [--master M] streaming_job/submit.py <tidemark args>`.

The same CLI as `tidemark`, so the stream and the dedup run unchanged on a cluster; the Spark
master and resources come from spark-submit (the SparkSession builder does not override them).
"""

import sys

from tidemark.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
