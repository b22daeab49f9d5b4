"""Notices, both kinds: the availability notice and the corrected-partition notice.

Built, encoded and validated (availability_notice, corrected_notice); the durable outbox in the lake
(outbox), cadence (cadence), the transports' seam and Pub/Sub sender (sender), the stream's notice
service (service), sending what is owed (drain), recording and delivering the corrected notices (corrected_delivery) and their Airflow
asset events (asset_events), and what was advertised or is owed (report).
"""
