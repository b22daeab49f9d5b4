# Shared lookups, the APIs tidemark uses, and the names derived from the inputs.

data "google_project" "this" {
  project_id = var.project
}

locals {
  # Google-managed service agents that act on our behalf.
  pubsub_agent = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"

  lake_bucket    = "${var.name_prefix}-${var.project}-lake"
  landing_bucket = "${var.name_prefix}-${var.project}-landing"
  ops_bucket     = "${var.name_prefix}-${var.project}-ops"

  lake_uri       = "gs://${local.lake_bucket}"
  landing_uri    = "gs://${local.landing_bucket}/${var.landing_prefix}"
  checkpoint_uri = "gs://${local.ops_bucket}/checkpoints/stream"
  # Where the stream moves the files it has read (`--archive`): beside the landing prefix, never
  # under it (the stream reads that prefix recursively). The raw input's retention.
  landing_archive_uri = "gs://${local.landing_bucket}/${var.landing_archive_prefix}"

  airflow_base_url = var.create_composer ? google_composer_environment.airflow[0].config[0].airflow_uri : var.airflow_base_url
}

resource "google_project_service" "apis" {
  for_each = toset([
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "composer.googleapis.com",
    "compute.googleapis.com",
    "dataproc.googleapis.com",
    "iam.googleapis.com",
    "monitoring.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
  ])
  project = var.project
  service = each.value
  # Leave APIs on at destroy: other workloads in the project may use them.
  disable_on_destroy = false
}
