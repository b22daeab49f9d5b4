# Airflow: a Cloud Composer 3 environment running the dedup DAG (or, with create_composer = false,
# an existing Airflow 3 at airflow_base_url, to which you deploy dags/ yourself).

resource "google_service_account" "composer" {
  count        = var.create_composer ? 1 : 0
  account_id   = "${var.name_prefix}-composer"
  display_name = "tidemark: Composer environment"
}

resource "google_project_iam_member" "composer_worker" {
  #checkov:skip=CKV_GCP_49:roles/composer.worker is the role Composer requires on the environment's own service account; it is granted to that account only.
  count   = var.create_composer ? 1 : 0
  project = var.project
  role    = "roles/composer.worker"
  member  = google_service_account.composer[0].member
}

# The DAG's publish task reads the current version of the date it deduplicated (the table's files).
resource "google_storage_bucket_iam_member" "composer_reads_lake" {
  count  = var.create_composer ? 1 : 0
  bucket = google_storage_bucket.lake.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.composer[0].member
}

# The notify_corrected task records and marks sent the corrected notices: objects under
# _notices/corrected/ only (create, overwrite, delete); everything else in the lake stays read-only.
resource "google_storage_bucket_iam_member" "composer_writes_corrected_outbox" {
  count  = var.create_composer ? 1 : 0
  bucket = google_storage_bucket.lake.name
  role   = "roles/storage.objectUser"
  member = google_service_account.composer[0].member
  condition {
    title      = "corrected-notices-outbox"
    expression = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.lake.name}/objects/_notices/corrected/\")"
  }
}

# Submitting the dedup as a Dataproc job (the DAG's DataprocSubmitJobOperator branch, on when
# TIDEMARK_DATAPROC_CLUSTER is set): jobs.create is project-scoped in Dataproc's IAM, and the
# predefined roles that hold it also create and delete clusters; this role holds only what
# submitting, watching and cancelling a job takes.
resource "google_project_iam_custom_role" "dataproc_job_submitter" {
  count       = var.create_composer ? 1 : 0
  role_id     = "${replace(var.name_prefix, "-", "_")}_dataproc_job_submitter"
  title       = "tidemark: submit Dataproc jobs"
  description = "Submit, watch and cancel Dataproc jobs on existing clusters; no cluster changes"
  permissions = [
    "dataproc.clusters.get",
    "dataproc.clusters.use",
    "dataproc.jobs.cancel",
    "dataproc.jobs.create",
    "dataproc.jobs.get",
  ]
}

resource "google_project_iam_member" "composer_submits_jobs" {
  count   = var.create_composer ? 1 : 0
  project = var.project
  role    = google_project_iam_custom_role.dataproc_job_submitter[0].id
  member  = google_service_account.composer[0].member
}

resource "google_composer_environment" "airflow" {
  count  = var.create_composer ? 1 : 0
  name   = "${var.name_prefix}-airflow"
  region = var.region

  config {
    environment_size = var.composer_environment_size

    software_config {
      image_version = var.composer_image_version
      pypi_packages = {
        # SparkSubmitOperator, which the DAG imports, and SparkConnectHook, its Spark Connect path
        # (dedup_spark_connect): the task runs tidemark.deduplication.dedup itself as a Connect client. Provider 6
        # is the first that depends on pyspark-client, the pure-Python Connect client (no JVM); 5.x
        # depends on the full pyspark (400 MB) instead. Never add plain pyspark beside it: both
        # install into the same pyspark/ folder and overwrite each other's files. (Locally,
        # constraints.txt pins 5.6.0 over the full pyspark the local Spark needs; its
        # hooks/spark_connect.py is the same. The Google provider is preinstalled.)
        "apache-airflow-providers-apache-spark" = ">=6,<7"
        # The Connect client's Spark major is the cluster's and the code's (setup.cfg: pyspark>=4.0,<5).
        "pyspark-client" = ">=4.0,<5"
        # tidemark's structured logs (tidemark.base.logs), which the publish task imports.
        "structlog" = ">=24"
        # The publish task reads the current version from the Iceberg table (tidemark.iceberg.publish).
        "pyiceberg" = ">=0.12,<0.13"
      }
      # Where the DAG's tasks find the lake and the Spark side (docs/production.md).
      # Two ways to the cluster's Spark (docs/production.md): a Dataproc job per run (the
      # default), or, with dedup_spark_connect, the DAG's spark_default connection of type
      # spark_connect naming the cluster's warm Spark Connect server (no job, no JVM start per run).
      env_variables = {
        TIDEMARK_LAKE             = local.lake_uri
        TIDEMARK_DAG_ID           = var.dag_id
        TIDEMARK_DATASET          = var.dataset
        TIDEMARK_ASSET_URI_PREFIX = var.asset_uri_prefix
        TIDEMARK_SUBMIT_APP       = "gs://${google_storage_bucket.ops.name}/${google_storage_bucket_object.submit_py.name}"
        TIDEMARK_DATAPROC_PROJECT = var.project
        TIDEMARK_DATAPROC_REGION  = var.region
        # Empty with dedup_spark_connect: the DAG then uses spark_default (below), not a job.
        TIDEMARK_DATAPROC_CLUSTER = var.dedup_spark_connect ? "" : google_dataproc_cluster.spark.name
        # The cluster's Spark Connect server (only used when TIDEMARK_DATAPROC_CLUSTER is empty).
        AIRFLOW_CONN_SPARK_DEFAULT = jsonencode({ conn_type = "spark_connect", host = local.spark_connect_host, port = var.spark_connect_port })
        # The notify_corrected task sends corrected notices here (unset: they stay owed in the lake).
        TIDEMARK_CORRECTED_TOPIC_PATH = google_pubsub_topic.corrected.id
        # The example consumer's output root (deploy_example_consumer_dag); empty: its default.
        TIDEMARK_SESSION_METRICS_ROOT = var.example_session_metrics_root
        # The changes consumer's output root (deploy_example_consumer_dag); empty: its default.
        TIDEMARK_USER_TOTALS_ROOT = var.example_user_totals_root
      }
    }

    node_config {
      service_account = google_service_account.composer[0].email
      # Composer 3 reaches the cluster's Spark Connect port through a VPC attachment to the
      # Dataproc network (only with dedup_spark_connect; the Dataproc API needs no such route).
      network    = var.dedup_spark_connect ? var.dataproc_network : null
      subnetwork = var.dedup_spark_connect ? var.dataproc_subnetwork : null
    }
  }

  depends_on = [google_project_iam_member.composer_worker]
}

# Deploy the DAGs and the tidemark modules they import into the environment's dags/ folder (on the
# workers' PYTHONPATH). .airflowignore keeps the DAG processor out of the packages.
# tidemark_reconcile runs every 15 minutes, tidemark_maintenance (tidemark gc) daily; set
# TIDEMARK_RECONCILE_INTERVAL / TIDEMARK_MAINTENANCE_INTERVAL in env_variables to change them.
locals {
  composer_dag_prefix = var.create_composer ? google_composer_environment.airflow[0].config[0].dag_gcs_prefix : ""
  composer_bucket     = var.create_composer ? regex("^gs://([^/]+)/", local.composer_dag_prefix)[0] : ""
  # First-party packages the DAG's tasks import (tests/test_terraform.py follows the imports).
  # (The receipt markers live in tidemark/panes/receipts.py: the DAGs need nothing from streaming_job/.)
  # dedup_sql: the dedup's SQL, run by the dedup task itself when it is a Spark Connect client.
  dag_packages = ["tidemark", "dedup_sql"]
  dag_files = var.create_composer ? toset(concat(
    ["dags/tidemark_dedup.py", "dags/tidemark_reconcile.py", "dags/tidemark_maintenance.py"],
    # The example consumers (docs/notices.md, docs/consumers.md) run on the partitioned asset events of
    # tidemark.sessions_dedup: daily and weekly metrics rebuilt per date, per-user totals kept from changesets.
    var.deploy_example_consumer_dag ? ["dags/example_session_metrics.py", "dags/example_weekly_session_metrics.py", "dags/example_changes_consumer.py"] : [],
    flatten([for pkg in local.dag_packages : [
      for f in fileset("${path.module}/..", "${pkg}/**") : f
      if can(regex("\\.(py|json|sql)$", f)) && !can(regex("/(devstack|__pycache__)/", f))
    ]]),
  )) : toset([])
}

variable "deploy_example_consumer_dag" {
  type        = bool
  default     = false
  description = "Also upload dags/example_session_metrics.py, dags/example_weekly_session_metrics.py and dags/example_changes_consumer.py (the example consumers of the partitioned asset events) to Composer"
}

variable "example_user_totals_root" {
  type        = string
  default     = ""
  description = "gs:// root the example changes consumer DAG keeps its per-user totals in (a bucket Composer's account may write; empty: its default under the lake, which Composer's account may not write)"
}

variable "example_session_metrics_root" {
  type        = string
  default     = ""
  description = "gs:// root the example consumer DAG writes its metrics to (a bucket Composer's account may write; empty: <lake>/_products/daily_session_metrics, which Composer's account may not write)"
}

resource "google_storage_bucket_object" "dag_files" {
  for_each = local.dag_files
  bucket   = local.composer_bucket
  name     = "dags/${trimprefix(each.value, "dags/")}"
  source   = "${path.module}/../${each.value}"
}

# tidemark's Airflow plugin (the dedup task's weight rule, tidemark/orchestration/date_priority.py):
# tidemark is deployed as source into dags/, not installed, so its `airflow.plugins` entry point does
# not exist here; this module in the plugins folder imports the plugin class for Airflow to register.
# Not named tidemark.py: it must not shadow the package.
resource "google_storage_bucket_object" "airflow_plugin" {
  count   = var.create_composer ? 1 : 0
  bucket  = local.composer_bucket
  name    = "plugins/tidemark_airflow_plugin.py"
  content = "from tidemark.orchestration.airflow_plugin import TidemarkPlugin  # noqa: F401 (registered by Airflow)\n"
}

resource "google_storage_bucket_object" "airflowignore" {
  count   = var.create_composer ? 1 : 0
  bucket  = local.composer_bucket
  name    = "dags/.airflowignore"
  content = join("", [for pkg in local.dag_packages : "${pkg}/\n"])
}
