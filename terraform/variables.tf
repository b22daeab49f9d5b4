# Inputs. Names of topics, subscriptions, the function and the DAG default to tidemark/base/names.py
# DEFAULTS (tests/test_terraform.py fails when they drift): override both together, never one.

variable "project" {
  type        = string
  description = "GCP project id"
}

variable "region" {
  type        = string
  default     = "europe-west1"
  description = "Region of every regional resource (function, Dataproc, Composer) and of the buckets"
}

variable "name_prefix" {
  type        = string
  default     = "tidemark"
  description = "Prefix of bucket and service account names (bucket names are global: add something unique)"
}

variable "labels" {
  type        = map(string)
  default     = {}
  description = "Extra labels on every resource"
}

# -- names shared with the code (tidemark/base/names.py DEFAULTS) -------------------------------------

variable "dataset" {
  type        = string
  default     = "sessions"
  description = "names.DATASET: the dataset notices are about; the function refuses others"
}

variable "events_topic" {
  type        = string
  default     = "tidemark-events"
  description = "names.EVENTS_TOPIC: where the mobile backend publishes raw events (one JSON object per message)"
}

variable "availability_topic" {
  type        = string
  default     = "tidemark-availability"
  description = "names.AVAILABILITY_TOPIC: availability notices published by the stream"
}

variable "dead_letter_topic" {
  type        = string
  default     = "tidemark-availability-dead-letter"
  description = "names.DEAD_LETTER_TOPIC: notices the function could not process after max_delivery_attempts"
}

variable "function_subscription" {
  type        = string
  default     = "tidemark-availability-to-function"
  description = "names.FUNCTION_SUBSCRIPTION: the push subscription that delivers notices to the function"
}

variable "late_data_subscription" {
  type        = string
  default     = "tidemark-availability-late-data"
  description = "names.LATE_DATA_SUBSCRIPTION: example filtered subscription for a downstream team"
}

variable "corrected_topic" {
  type        = string
  default     = "tidemark-corrected"
  description = "names.CORRECTED_TOPIC: one notice per published deduplicated version (docs/notices.md)"
}

variable "corrected_subscription" {
  type        = string
  default     = "tidemark-corrected-changed"
  description = "names.CORRECTED_SUBSCRIPTION: example filtered subscription of a downstream team (versions that changed sessions)"
}

variable "function_name" {
  type        = string
  default     = "tidemark-notice-to-dag"
  description = "names.FUNCTION_NAME: the Cloud Function (2nd gen) turning a notice into a DAG run"
}

variable "dag_id" {
  type        = string
  default     = "tidemark_dedup"
  description = "names.DAG_ID: the Airflow DAG the function triggers"
}

variable "asset_uri_prefix" {
  type        = string
  default     = "tidemark://sessions_dedup"
  description = "names.ASSET_URI_PREFIX: Airflow asset URIs of the published versions"
}

# -- landing -----------------------------------------------------------------------------------------

variable "events_to_landing_subscription" {
  type        = string
  default     = "tidemark-events-to-landing"
  description = "Cloud Storage subscription writing the events topic into the landing bucket"
}

variable "landing_prefix" {
  type        = string
  default     = "events/"
  description = "Object prefix of landed files in the landing bucket (the stream reads it recursively)"
}

variable "landing_file_max_duration" {
  type        = string
  default     = "60s"
  description = "Longest a landed file stays open (Pub/Sub allows 60s to 600s): the landing latency"
}

variable "landing_file_max_bytes" {
  type        = number
  default     = 104857600
  description = "Largest landed file before Pub/Sub starts a new one"
}

variable "landing_archive_prefix" {
  type        = string
  default     = "archive/"
  description = "Object prefix (in the landing bucket, outside landing_prefix) where the stream moves the files it has read (tidemark stream --archive): the raw input, under received=YYYY-MM-DD/"
  validation {
    condition     = endswith(var.landing_archive_prefix, "/") && !startswith(var.landing_archive_prefix, "_") && !startswith(var.landing_archive_prefix, ".")
    error_message = "landing_archive_prefix must end with / and not start with _ or . (a folder name the stream would hide)."
  }
}

variable "stream_checkpoint_rotation" {
  type        = number
  default     = 1440
  description = "tidemark stream --checkpoint-rotation: micro-batches per checkpoint generation (1440 = a day of the default 1m trigger), so the file-source log does not grow with the landing's age"
  validation {
    condition     = var.stream_checkpoint_rotation >= 1
    error_message = "stream_checkpoint_rotation must be a positive number of micro-batches."
  }
}

variable "landing_nearline_after_days" {
  type        = number
  default     = 30
  description = "Landed and archived files move to NEARLINE after this many days (the stream has read them by then)"
}

variable "landing_retention_days" {
  type        = number
  default     = 0
  description = "Delete landed and archived files after this many days; 0 keeps them (the archive is the replay source)"
}

# -- lake --------------------------------------------------------------------------------------------

variable "noncurrent_retention_days" {
  type        = number
  default     = 14
  description = <<-EOT
    Lake objects that were deleted or overwritten (superseded dedup versions removed by `tidemark gc`,
    partial receipt partitions rewritten by a replayed batch) stay recoverable this many days.
  EOT
}

variable "force_destroy_buckets" {
  type        = bool
  default     = false
  description = "Let `terraform destroy` delete non-empty buckets (trial projects only)"
}

# -- the Cloud Function -----------------------------------------------------------------------------

variable "function_source_dir" {
  type        = string
  default     = "../build/cloud_function"
  description = "The bundle `tidemark function-bundle --out build/cloud_function` builds (relative to terraform/)"
}

variable "function_entry_point" {
  type        = string
  default     = "on_notice"
  description = "The CloudEvent function in cloud_function/main.py"
}

variable "function_runtime" {
  type    = string
  default = "python311"
}

variable "function_max_instances" {
  type        = number
  default     = 5
  description = "Upper bound of concurrent function instances, hence of concurrent Airflow API calls"
}

variable "function_timeout_seconds" {
  type        = number
  default     = 60
  description = "Function timeout; the push subscription's ack deadline follows it"
}

variable "function_ingress" {
  type        = string
  default     = "ALLOW_ALL"
  description = <<-EOT
    Network ingress of the function. Every request must still carry an OIDC token of the push
    service account (no allUsers invoker). ALLOW_INTERNAL_ONLY also works for Pub/Sub push from
    the same project or VPC-SC perimeter; verify in your organisation before switching.
  EOT
}

variable "function_build_service_account" {
  type        = string
  default     = null
  description = "Service account Cloud Build uses to build the function (null: the project default)"
}

variable "max_delivery_attempts" {
  type        = number
  default     = 10
  description = "Deliveries of one notice before it goes to the dead-letter topic (5 to 100)"
}

# -- Airflow -----------------------------------------------------------------------------------------

variable "create_composer" {
  type        = bool
  default     = true
  description = "Create a Cloud Composer 3 environment; false: point airflow_base_url at an existing Airflow"
}

variable "composer_image_version" {
  type        = string
  default     = "composer-3-airflow-3.3.1"
  description = "Composer 3 image with Airflow 3 (pin a build, e.g. composer-3-airflow-3.3.1-build.N)"
}

variable "composer_environment_size" {
  type    = string
  default = "ENVIRONMENT_SIZE_SMALL"
}

variable "airflow_base_url" {
  type        = string
  default     = ""
  description = "Web server URL of an existing Airflow 3 (used when create_composer = false)"
}

variable "airflow_auth_mode" {
  type        = string
  default     = "google"
  description = "How the function authenticates: google (Composer, IAM), password (self-managed Airflow, secret in Secret Manager)"

  validation {
    condition     = contains(["google", "password"], var.airflow_auth_mode)
    error_message = "airflow_auth_mode must be google or password."
  }
}

variable "airflow_username" {
  type        = string
  default     = "tidemark-function"
  description = "Airflow user of the function (auth mode password); its password goes in Secret Manager"
}

# -- Spark on Dataproc ------------------------------------------------------------------------------

variable "tidemark_wheel" {
  type        = string
  default     = "../dist/tidemark-0.1.0-py3-none-any.whl"
  description = "The tidemark wheel (`pip wheel --no-deps -w dist .`), installed on every Dataproc node"
}

variable "dataproc_image_version" {
  type        = string
  default     = "3.0-debian12"
  description = "Dataproc image with Spark 4 (tidemark needs pyspark >= 4) and Python 3.11"
}

variable "dataproc_master_machine_type" {
  type    = string
  default = "n2-standard-4"
}

variable "dataproc_worker_machine_type" {
  type    = string
  default = "n2-standard-4"
}

variable "dataproc_workers" {
  type    = number
  default = 2
}

variable "dataproc_network" {
  type        = string
  default     = "default"
  description = "VPC network of dataproc_subnetwork (for the Cloud NAT)"
}

variable "dataproc_subnetwork" {
  type        = string
  default     = "default"
  description = "Subnetwork of the Dataproc nodes; needs Private Google Access (nodes have no external IP)"
}

variable "create_nat" {
  type        = bool
  default     = true
  description = "Cloud NAT for the nodes' egress: the init action installs tidemark's dependencies from PyPI (false with a custom image or a PyPI mirror)"
}

variable "run_stream_job" {
  type        = bool
  default     = true
  description = "Submit the streaming job to the Dataproc cluster (a restartable job)"
}

variable "stream_trigger_interval" {
  type    = string
  default = "1m"
}


variable "dedup_spark_connect" {
  type        = bool
  default     = false
  description = "The DAG's dedup as a Spark Connect client of a server on the Dataproc master (warm; docs/production.md) instead of a Dataproc job per run"
}

variable "spark_connect_port" {
  type    = number
  default = 15002
}

variable "spark_connect_client_ranges" {
  type        = list(string)
  default     = []
  description = "CIDR ranges allowed to reach the Spark Connect port: the subnetwork Composer's workers are attached to"
}

# -- alerting (terraform/monitoring.tf, docs/metrics.md) ---------------------------------------------

variable "alert_notification_channels" {
  type        = list(string)
  default     = []
  description = "Cloud Monitoring notification channel ids the SLO alert policies notify (none: the incidents are only listed)"
}

variable "alert_evaluation_interval" {
  type        = string
  default     = "60s"
  description = "How often Cloud Monitoring evaluates each SLO alert's PromQL condition"
}
