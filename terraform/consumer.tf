# A downstream team's service account, as an example: it subscribes to the corrected topic through
# its filtered subscription (pubsub.tf) and reads the corrected output (the Iceberg table's catalog
# and files), and can write none of it. Its own products go to its own bucket (not created here).

variable "create_consumer_example" {
  type        = bool
  default     = true
  description = "Create the example consumer service account and its read-only grants"
}

resource "google_service_account" "consumer" {
  count        = var.create_consumer_example ? 1 : 0
  account_id   = "${var.name_prefix}-consumer"
  display_name = "tidemark: example downstream consumer (read only)"
}

# Pull from (and ack on) the example subscription; nothing on the topic itself: it cannot publish.
resource "google_pubsub_subscription_iam_member" "consumer_subscriber" {
  count        = var.create_consumer_example ? 1 : 0
  subscription = google_pubsub_subscription.corrected_changed.id
  role         = "roles/pubsub.subscriber"
  member       = google_service_account.consumer[0].member
}

# Read the table's files and its in-lake catalog properties only: objects under sessions_dedup/
# and _catalog/ (and listing the bucket to find them). objectViewer has no create/delete.
resource "google_storage_bucket_iam_member" "consumer_reads_corrected" {
  count  = var.create_consumer_example ? 1 : 0
  bucket = google_storage_bucket.lake.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.consumer[0].member
  condition {
    title       = "corrected-output-only"
    description = "The Iceberg table (sessions_dedup/) and its catalog properties (_catalog/), not the raw panes"
    expression  = "resource.type == \"storage.googleapis.com/Bucket\" || resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.lake.name}/objects/sessions_dedup/\") || resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.lake.name}/objects/_catalog/\")"
  }
}

# The table through the BigLake Iceberg REST catalog: view only.
resource "google_project_iam_member" "consumer_biglake_viewer" {
  count   = var.create_consumer_example && var.create_iceberg_catalog ? 1 : 0
  project = var.project
  role    = "roles/biglake.viewer"
  member  = google_service_account.consumer[0].member
}

output "consumer_service_account" {
  value       = var.create_consumer_example ? google_service_account.consumer[0].email : null
  description = "The example consumer's service account (subscribes to the corrected subscription, reads the table)"
}
