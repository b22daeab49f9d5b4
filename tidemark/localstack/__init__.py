"""Starting and stopping the real servers on loopback: Pub/Sub emulator, Airflow, the function."""
