# The Cloud Function (2nd gen): an availability notice -> one run of the dedup DAG.
# Source: the folder `tidemark function-bundle --out build/cloud_function` assembles (main.py is
# cloud_function/main.py; the tidemark modules it imports sit beside it).

# Runs the function: reads the Airflow secret (password mode) or calls Composer (google mode).
resource "google_service_account" "function" {
  account_id   = "${var.name_prefix}-function"
  display_name = "tidemark: notice -> DAG run function"
}

# Signs the OIDC token of each push; may invoke the function and nothing else.
resource "google_service_account" "push" {
  account_id   = "${var.name_prefix}-push"
  display_name = "tidemark: Pub/Sub push to the function"
}

data "archive_file" "function" {
  type        = "zip"
  source_dir  = "${path.module}/${var.function_source_dir}"
  output_path = "${path.module}/.build/cloud_function.zip"
  excludes    = ["__pycache__"]
}

# Named by content hash: a changed bundle is a new object, which redeploys the function.
resource "google_storage_bucket_object" "function_source" {
  name   = "code/cloud_function/${data.archive_file.function.output_md5}.zip"
  bucket = google_storage_bucket.ops.name
  source = data.archive_file.function.output_path
}

resource "google_secret_manager_secret" "airflow_password" {
  count     = var.airflow_auth_mode == "password" ? 1 : 0
  secret_id = "${var.name_prefix}-airflow-password"

  replication {
    auto {}
  }

  depends_on = [google_project_service.apis]
}
# The secret's value never goes through Terraform (it would sit in the state); add it with
#   printf %s "$PASSWORD" | gcloud secrets versions add tidemark-airflow-password --data-file=-

resource "google_secret_manager_secret_iam_member" "function_reads_password" {
  count     = var.airflow_auth_mode == "password" ? 1 : 0
  secret_id = google_secret_manager_secret.airflow_password[0].id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.function.member
}

resource "google_cloudfunctions2_function" "notice_to_dag" {
  #checkov:skip=CKV_GCP_124:Pub/Sub push reaches the function at its URL and every request must carry the push service account's OIDC token (roles/run.invoker to that account only, no allUsers). Set function_ingress = ALLOW_INTERNAL_ONLY where same-project Pub/Sub push counts as internal.
  name        = var.function_name
  location    = var.region
  description = "tidemark: availability notice -> ${var.dag_id} DAG run"

  build_config {
    runtime         = var.function_runtime
    entry_point     = var.function_entry_point
    service_account = var.function_build_service_account
    source {
      storage_source {
        bucket = google_storage_bucket.ops.name
        object = google_storage_bucket_object.function_source.name
      }
    }
  }

  service_config {
    service_account_email            = google_service_account.function.email
    ingress_settings                 = var.function_ingress
    all_traffic_on_latest_revision   = true
    min_instance_count               = 0
    max_instance_count               = var.function_max_instances
    available_memory                 = "256M"
    timeout_seconds                  = var.function_timeout_seconds
    max_instance_request_concurrency = 1

    # What cloud_function/main.py and tidemark/orchestration/airflow_api.py read (tests/test_terraform.py checks).
    environment_variables = {
      AIRFLOW_BASE_URL  = local.airflow_base_url
      AIRFLOW_AUTH_MODE = var.airflow_auth_mode
      AIRFLOW_USERNAME  = var.airflow_auth_mode == "password" ? var.airflow_username : ""
      TIDEMARK_DAG_ID   = var.dag_id
      TIDEMARK_DATASET  = var.dataset
      # Rejected (invalid) notices are acked, so Pub/Sub's dead-letter policy never sees them: the
      # function forwards a copy here itself (cloud_function/dead_letter.py), into the same topic
      # the push subscription dead-letters to (projects/P/topics/T; kept by dead_letter_hold).
      DEAD_LETTER_TOPIC = google_pubsub_topic.dead_letter.id
    }

    # Password mode: the secret as an environment variable, resolved at instance start.
    dynamic "secret_environment_variables" {
      for_each = google_secret_manager_secret.airflow_password
      content {
        key        = "AIRFLOW_PASSWORD"
        project_id = var.project
        secret     = secret_environment_variables.value.secret_id
        version    = "latest"
      }
    }
  }

  depends_on = [
    google_project_service.apis,
    google_secret_manager_secret_iam_member.function_reads_password,
    google_pubsub_topic_iam_member.function_dead_letter_publisher,
  ]
}

# The function publishes its copies of rejected notices to the dead-letter topic, nowhere else.
resource "google_pubsub_topic_iam_member" "function_dead_letter_publisher" {
  topic  = google_pubsub_topic.dead_letter.id
  role   = "roles/pubsub.publisher"
  member = google_service_account.function.member
}

# Only the push service account may invoke the function (a 2nd gen function is a Cloud Run
# service of the same name); no allUsers binding anywhere.
resource "google_cloud_run_service_iam_member" "push_invoker" {
  location = google_cloudfunctions2_function.notice_to_dag.location
  service  = google_cloudfunctions2_function.notice_to_dag.name
  role     = "roles/run.invoker"
  member   = google_service_account.push.member
}

# Pub/Sub's service agent mints the push's OIDC tokens as the push service account.
resource "google_service_account_iam_member" "pubsub_signs_push_tokens" {
  service_account_id = google_service_account.push.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_agent
}

# Composer: calling its Airflow REST API takes composer.environments.get (roles/composer.user,
# which has no narrower scope than the project) plus an Airflow role for the service account
# (docs/production.md: register it with the Op role).
resource "google_project_iam_member" "function_composer_user" {
  count   = var.create_composer && var.airflow_auth_mode == "google" ? 1 : 0
  project = var.project
  role    = "roles/composer.user"
  member  = google_service_account.function.member
}
