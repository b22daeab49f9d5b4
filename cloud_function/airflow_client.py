"""The Airflow REST client the function uses: tidemark/orchestration/airflow_api.py (the DAGs and the notices
drain use it too, and they ship with tidemark/ alone). Re-exported here under its former name."""

from tidemark.orchestration.airflow_api import (  # noqa: F401
    AUTH_MODES,
    DEFAULT_TIMEOUT,
    AirflowClient,
    AirflowError,
    AirflowRejected,
    ConfigError,
    TransientAirflowError,
    TriggerResult,
)
