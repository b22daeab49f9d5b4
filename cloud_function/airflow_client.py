"""The Airflow REST client the function uses: tidemark/airflow_api.py (the DAGs and the notices
drain use it too, and they ship with tidemark/ alone). Re-exported here under its former name."""
from tidemark.airflow_api import (AUTH_MODES, DEFAULT_TIMEOUT, AirflowClient, AirflowError,  # noqa: F401
                                  AirflowRejected, ConfigError, TransientAirflowError, TriggerResult)
