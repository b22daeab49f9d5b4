output "lake_uri" {
  value       = local.lake_uri
  description = "--lake of every tidemark command"
}

output "landing_uri" {
  value       = local.landing_uri
  description = "--landing of the stream: where the events subscription writes JSON-lines files"
}

output "checkpoint_uri" {
  value = local.checkpoint_uri
}

output "events_topic" {
  value       = google_pubsub_topic.events.id
  description = "Publish raw events here (one JSON object per message)"
}

output "availability_topic" {
  value       = google_pubsub_topic.availability.id
  description = "--notify-topic of the stream"
}

output "dead_letter_subscription" {
  value = google_pubsub_subscription.dead_letter_hold.id
}

output "late_data_subscription" {
  value = google_pubsub_subscription.late_data.id
}

output "function_uri" {
  value = google_cloudfunctions2_function.notice_to_dag.url
}

output "airflow_uri" {
  value = local.airflow_base_url
}

output "airflow_password_secret" {
  value       = var.airflow_auth_mode == "password" ? google_secret_manager_secret.airflow_password[0].id : null
  description = "Add the Airflow password as a version of this secret (never through Terraform)"
}

output "function_service_account" {
  value       = google_service_account.function.email
  description = "Register it in Airflow with the Op role (Composer: the user is created on first call)"
}

output "dataproc_cluster" {
  value = google_dataproc_cluster.spark.name
}

output "stream_job_id" {
  value = var.run_stream_job ? google_dataproc_job.stream[0].reference[0].job_id : null
}

output "dedup_submit_example" {
  value       = <<-EOT
    gcloud dataproc jobs submit pyspark gs://${google_storage_bucket.ops.name}/${google_storage_bucket_object.submit_py.name} \
      --cluster=${google_dataproc_cluster.spark.name} --region=${var.region} \
      --properties=spark.sql.session.timeZone=UTC \
      -- dedup --lake ${local.lake_uri} --event-date YYYY-MM-DD
  EOT
  description = "Run the dedup of one date by hand, exactly as the DAG does"
}

output "rules_migrate_example" {
  value       = <<-EOT
    gcloud dataproc jobs submit pyspark gs://${google_storage_bucket.ops.name}/${google_storage_bucket_object.submit_py.name} \
      --cluster=${google_dataproc_cluster.spark.name} --region=${var.region} \
      --properties=spark.sql.session.timeZone=UTC \
      -- rules migrate --lake ${local.lake_uri} --gap 20m
  EOT
  description = "Change the lake's session rules on the cluster: records them and re-deduplicates every date (docs/production.md)"
}

output "landing_archive_uri" {
  value       = local.landing_archive_uri
  description = "--archive of the stream: the files it has read, under received=YYYY-MM-DD/ (the raw input; `tidemark landing --archive` lists it)"
}
