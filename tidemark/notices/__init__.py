"""Notices, both kinds: the availability notice and the corrected-partition notice, built,
encoded and validated (availability_notice, corrected_notice); the durable outbox in the lake
(outbox), cadence (cadence), the transports' seam and Pub/Sub sender (sender), the stream's
notice service (service), sending what is owed (drain), corrected notices (corrected) and
their Airflow asset events (asset_events), and what was advertised or is owed (report).
"""
