"""tidemark's Airflow plugin: what Airflow must know by name to load the tidemark DAGs.

Registered as the `airflow.plugins` entry point of the tidemark distribution (setup.cfg), so every
Airflow process of an environment where tidemark is installed (the scheduler, the dag-processor,
`airflow dags test`, Composer with tidemark among its PyPI packages) loads it without a plugins
folder.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from tidemark.orchestration.date_priority import OlderDatesFirst


class TidemarkPlugin(AirflowPlugin):
    """The dedup task's weight rule (tidemark.orchestration.date_priority)."""

    name = "tidemark"
    priority_weight_strategies = [OlderDatesFirst]
