"""Airflow and the runs it starts: the REST client of Airflow's API (airflow_api), the
dag_run_id rule (runs), durable rerun obligations (obligations) and reconciliation of stale
dates (reconcile).
"""
