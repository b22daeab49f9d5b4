# The deduplicated sessions as an Apache Iceberg table any engine reads (docs/production.md):
# the BigLake metastore Iceberg REST catalog on the lake bucket, its `tidemark` namespace, the
# catalog description every tidemark process reads from the lake, and who may use it.
# The table itself (tidemark.sessions_dedup) is created by the first dedup commit (pyiceberg).

variable "create_iceberg_catalog" {
  type        = bool
  default     = true
  description = "Create the BigLake metastore Iceberg REST catalog on the lake bucket (false: configure a catalog yourself, docs/production.md)"
}

variable "iceberg_rest_uri" {
  type        = string
  default     = "https://biglake.googleapis.com/iceberg/v1/restcatalog"
  description = "The BigLake metastore Iceberg REST endpoint"
}

variable "iceberg_readers" {
  type        = list(string)
  default     = []
  description = "Members (group:..., user:..., serviceAccount:...) who query the corrected sessions from BigQuery or another engine"
}

locals {
  # tidemark/iceberg/table.py: table namespace.name, and where the catalog description lives in the lake.
  iceberg_namespace       = "tidemark"
  iceberg_table           = "sessions_dedup"
  iceberg_catalog_object  = "_catalog/catalog.json"
  iceberg_bigquery_prefix = "${var.project}.${local.lake_bucket}.${local.iceberg_namespace}"
}

resource "google_project_service" "biglake" {
  count              = var.create_iceberg_catalog ? 1 : 0
  project            = var.project
  service            = "biglake.googleapis.com"
  disable_on_destroy = false
}

# One catalog per bucket, named after it (BigQuery addresses the table as
# PROJECT.BUCKET.tidemark.sessions_dedup). End-user credentials: each engine reads the files with
# its own identity, which the bucket's IAM below allows.
resource "google_biglake_iceberg_catalog" "lake" {
  count           = var.create_iceberg_catalog ? 1 : 0
  name            = google_storage_bucket.lake.name
  catalog_type    = "CATALOG_TYPE_GCS_BUCKET"
  credential_mode = "CREDENTIAL_MODE_END_USER"
  depends_on      = [google_project_service.biglake]
}

resource "google_biglake_iceberg_namespace" "tidemark" {
  count        = var.create_iceberg_catalog ? 1 : 0
  catalog      = google_biglake_iceberg_catalog.lake[0].name
  namespace_id = local.iceberg_namespace
}

# pyiceberg catalog properties in the lake: the Dataproc driver that commits, the Composer worker
# that reads the current version and any laptop find the catalog from --lake alone, with their
# Application Default Credentials (no secret in here).
resource "google_storage_bucket_object" "iceberg_catalog_config" {
  count        = var.create_iceberg_catalog ? 1 : 0
  bucket       = google_storage_bucket.lake.name
  name         = local.iceberg_catalog_object
  content_type = "application/json"
  content = jsonencode({
    type                         = "rest"
    uri                          = var.iceberg_rest_uri
    warehouse                    = local.lake_uri
    "header.x-goog-user-project" = var.project
    auth                         = { type = "google" }
  })
}

# The dedup driver commits versions (catalog writes) on the Dataproc nodes' account.
resource "google_project_iam_member" "spark_biglake_editor" {
  count   = var.create_iceberg_catalog ? 1 : 0
  project = var.project
  role    = "roles/biglake.editor"
  member  = google_service_account.spark.member
}

# The DAG's publish task reads the current version (catalog reads; the lake objects it already reads).
resource "google_project_iam_member" "composer_biglake_viewer" {
  count   = var.create_iceberg_catalog && var.create_composer ? 1 : 0
  project = var.project
  role    = "roles/biglake.viewer"
  member  = google_service_account.composer[0].member
}

# Consumers: the catalog and the table's files (read only).
resource "google_project_iam_member" "readers_biglake_viewer" {
  for_each = var.create_iceberg_catalog ? toset(var.iceberg_readers) : toset([])
  project  = var.project
  role     = "roles/biglake.viewer"
  member   = each.value
}

resource "google_storage_bucket_iam_member" "readers_lake" {
  for_each = var.create_iceberg_catalog ? toset(var.iceberg_readers) : toset([])
  bucket   = google_storage_bucket.lake.name
  role     = "roles/storage.objectViewer"
  member   = each.value
}

output "iceberg_bigquery_table" {
  value       = "${local.iceberg_bigquery_prefix}.${local.iceberg_table}"
  description = "The corrected sessions in BigQuery: SELECT ... FROM `<this>` WHERE event_date = '2026-03-07'"
}

output "iceberg_catalog_config" {
  value       = var.create_iceberg_catalog ? "${local.lake_uri}/${local.iceberg_catalog_object}" : null
  description = "The pyiceberg catalog properties tidemark reads from the lake"
}
