"""The whole system on one machine, real servers on loopback.

For `tidemark up`, `status` and `down`, the demo and the tests: the stack (stack), processes in their own group (process), the Pub/Sub
emulator (pubsub_emulator), Airflow (airflow; task_preload, what its task processes start with) on
SQLite or PostgreSQL (postgres), the Cloud Function (function), Prometheus (prometheus), a Spark
standalone cluster (spark_cluster) and a Spark Connect server (spark_connect).
"""
