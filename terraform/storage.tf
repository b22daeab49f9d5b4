# Buckets: the lake (sessions, dedup versions), the landing (raw events from Pub/Sub) and ops
# (the stream's checkpoint, job code, Dataproc staging and temp files).

resource "google_storage_bucket" "lake" {
  #checkov:skip=CKV_GCP_62:Access is audited with Cloud Audit Logs (Data Access logs); legacy usage logs add nothing.
  name                        = local.lake_bucket
  location                    = var.region
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = var.force_destroy_buckets

  # Published versions and receipt partitions are immutable; a delete (by `tidemark gc`) or an
  # overwrite (a replayed batch rewriting a partition it had not completed) keeps the old object
  # as noncurrent, recoverable for noncurrent_retention_days.
  versioning {
    enabled = true
  }

  # Old dedup versions: `tidemark gc` expires Iceberg snapshots and deletes unreferenced files (it
  # knows the table's current snapshot; an age rule on live objects could delete a current version
  # that is simply old). What it
  # deletes, and any overwritten object, is purged here once noncurrent for the retention.
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.noncurrent_retention_days
      with_state                 = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  lifecycle_rule {
    condition {
      age = 1
    }
    action {
      type = "AbortIncompleteMultipartUpload"
    }
  }

  depends_on = [google_project_service.apis]
}

resource "google_storage_bucket" "landing" {
  #checkov:skip=CKV_GCP_62:Access is audited with Cloud Audit Logs (Data Access logs); legacy usage logs add nothing.
  name                        = local.landing_bucket
  location                    = var.region
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = var.force_destroy_buckets

  # Landed files are written once by Pub/Sub and never rewritten; versioning guards against
  # an accidental delete of the replay source.
  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      age            = var.landing_nearline_after_days
      matches_prefix = [var.landing_prefix, var.landing_archive_prefix]
    }
    action {
      type          = "SetStorageClass"
      storage_class = "NEARLINE"
    }
  }

  dynamic "lifecycle_rule" {
    for_each = var.landing_retention_days > 0 ? [var.landing_retention_days] : []
    content {
      condition {
        age            = lifecycle_rule.value
        matches_prefix = [var.landing_prefix, var.landing_archive_prefix]
      }
      action {
        type = "Delete"
      }
    }
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.noncurrent_retention_days
      with_state                 = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}

resource "google_storage_bucket" "ops" {
  #checkov:skip=CKV_GCP_62:Access is audited with Cloud Audit Logs (Data Access logs); legacy usage logs add nothing.
  #checkov:skip=CKV_GCP_78:Checkpoint and state files are rewritten every micro-batch; versions would only pile up. Code objects are re-uploaded by terraform apply.
  name                        = local.ops_bucket
  location                    = var.region
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = var.force_destroy_buckets

  # Dataproc writes its temp files (job history, driver output) here too.
  lifecycle_rule {
    condition {
      age            = 30
      matches_prefix = ["dataproc-temp/", "google-cloud-dataproc-metainfo/"]
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}

# Pub/Sub's service agent writes landed files: create objects and read the bucket's metadata
# (what a Cloud Storage subscription needs, nothing more).
resource "google_storage_bucket_iam_member" "landing_pubsub_writer" {
  for_each = toset(["roles/storage.objectCreator", "roles/storage.legacyBucketReader"])
  bucket   = google_storage_bucket.landing.name
  role     = each.value
  member   = local.pubsub_agent
}
