# Topics and subscriptions:
#   events topic --(Cloud Storage subscription, text: one JSON object per line)--> landing bucket
#   availability topic --(push, OIDC)--> the Cloud Function --(after N failures)--> dead-letter topic
#   the Cloud Function --(a copy of each rejected notice, DEAD_LETTER_TOPIC)--> dead-letter topic
#   availability topic --(filter: late)--> a downstream team's pull subscription
#   corrected topic (the dedup DAG's notify_corrected task) --(filter: change != unchanged)--> a
#   downstream team's pull subscription (its service account: consumer.tf)

resource "google_pubsub_topic" "events" {
  #checkov:skip=CKV_GCP_83:Google-managed encryption is accepted for this data; set kms_key_name here if your policy requires CMEK.
  name                       = var.events_topic
  message_retention_duration = "86400s"
  depends_on                 = [google_project_service.apis]
}

resource "google_pubsub_subscription" "events_to_landing" {
  name  = var.events_to_landing_subscription
  topic = google_pubsub_topic.events.id

  # No avro_config: the text format writes each message's data followed by a newline, which is
  # the landing's JSON-lines input contract (docs/input-contract.md). Objects appear whole.
  cloud_storage_config {
    bucket                   = google_storage_bucket.landing.name
    filename_prefix          = var.landing_prefix
    filename_suffix          = ".jsonl"
    filename_datetime_format = "YYYY-MM-DD/hh_mm_ssZ"
    max_duration             = var.landing_file_max_duration
    max_bytes                = var.landing_file_max_bytes
  }

  message_retention_duration = "604800s"
  expiration_policy {
    ttl = "" # never expires, even when no events arrive for a month
  }

  depends_on = [google_storage_bucket_iam_member.landing_pubsub_writer]
}

resource "google_pubsub_topic" "availability" {
  #checkov:skip=CKV_GCP_83:Notices carry partition metadata only (dates, counts, paths), no event data.
  name                       = var.availability_topic
  message_retention_duration = "604800s"
  depends_on                 = [google_project_service.apis]
}

resource "google_pubsub_topic" "dead_letter" {
  #checkov:skip=CKV_GCP_83:Notices carry partition metadata only (dates, counts, paths), no event data.
  name       = var.dead_letter_topic
  depends_on = [google_project_service.apis]
}

# Messages published to a topic without subscriptions are lost: this one keeps dead letters for
# an operator (7 days, never expires). Replay with `gcloud pubsub subscriptions pull` + republish.
resource "google_pubsub_subscription" "dead_letter_hold" {
  name                       = "${var.dead_letter_topic}-hold"
  topic                      = google_pubsub_topic.dead_letter.id
  message_retention_duration = "604800s"
  retain_acked_messages      = true
  ack_deadline_seconds       = 60
  expiration_policy {
    ttl = ""
  }
}

# Why an explicit push subscription rather than the function's Eventarc trigger: its name is the
# one the code knows (names.FUNCTION_SUBSCRIPTION) and its dead-letter policy and retry backoff are
# declared here; Eventarc's own subscription is managed by Eventarc.
resource "google_pubsub_subscription" "to_function" {
  name  = var.function_subscription
  topic = google_pubsub_topic.availability.id

  # For push, the ack deadline is also the HTTP request timeout.
  ack_deadline_seconds = var.function_timeout_seconds

  push_config {
    push_endpoint = google_cloudfunctions2_function.notice_to_dag.url
    oidc_token {
      service_account_email = google_service_account.push.email
      audience              = google_cloudfunctions2_function.notice_to_dag.url
    }
  }

  # Airflow down: the function raises (HTTP 500) and Pub/Sub backs off, then dead-letters.
  retry_policy {
    minimum_backoff = "10s"
    maximum_backoff = "600s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter.id
    max_delivery_attempts = var.max_delivery_attempts
  }

  message_retention_duration = "604800s"
  expiration_policy {
    ttl = ""
  }

  depends_on = [
    google_pubsub_topic_iam_member.dead_letter_publisher,
    google_cloud_run_service_iam_member.push_invoker,
  ]
}

# Example for a downstream team: only notices of partitions that arrived after the watermark passed
# the end of their event date (attributes per tidemark/notices/availability_notice.py; docs/notices.md lists them).
# Add `AND hasPrefix(attributes.event_date, "2026-03")` to narrow to dates. Filters are immutable.
resource "google_pubsub_subscription" "late_data" {
  name                       = var.late_data_subscription
  topic                      = google_pubsub_topic.availability.id
  filter                     = "attributes.dataset = \"${var.dataset}\" AND attributes.late = \"true\""
  ack_deadline_seconds       = 60
  message_retention_duration = "604800s"
}

# Dead-lettering: Pub/Sub's service agent forwards from the subscription to the dead-letter topic.
resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  topic  = google_pubsub_topic.dead_letter.id
  role   = "roles/pubsub.publisher"
  member = local.pubsub_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_subscriber" {
  subscription = google_pubsub_subscription.to_function.id
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_agent
}

# The stream (on Dataproc) publishes notices to this topic and nowhere else.
resource "google_pubsub_topic_iam_member" "stream_publisher" {
  topic  = google_pubsub_topic.availability.id
  role   = "roles/pubsub.publisher"
  member = google_service_account.spark.member
}

# One notice per published deduplicated version (tidemark/notices/corrected_notice.py, docs/notices.md).
resource "google_pubsub_topic" "corrected" {
  #checkov:skip=CKV_GCP_83:Notices carry version metadata only (dates, counts, snapshot ids, paths), no event data.
  name                       = var.corrected_topic
  message_retention_duration = "604800s"
  depends_on                 = [google_project_service.apis]
}

# Example for a downstream team: versions whose sessions changed (attributes per
# tidemark/notices/corrected_notice.py). Add `AND hasPrefix(attributes.event_date, "2026-03")` to narrow.
resource "google_pubsub_subscription" "corrected_changed" {
  name                       = var.corrected_subscription
  topic                      = google_pubsub_topic.corrected.id
  filter                     = "attributes.dataset = \"${var.dataset}\" AND attributes.change != \"unchanged\""
  ack_deadline_seconds       = 60
  message_retention_duration = "604800s"
  expiration_policy {
    ttl = ""
  }
}

# The DAG's notify_corrected task (on Composer's workers) sends the corrected notices.
resource "google_pubsub_topic_iam_member" "composer_corrected_publisher" {
  count  = var.create_composer ? 1 : 0
  topic  = google_pubsub_topic.corrected.id
  role   = "roles/pubsub.publisher"
  member = google_service_account.composer[0].member
}
