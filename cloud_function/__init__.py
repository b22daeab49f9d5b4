"""The Cloud Function: an availability notice on Pub/Sub -> one tidemark_dedup run (main)."""
