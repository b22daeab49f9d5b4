# Spark on Dataproc: one cluster runs the streaming job (a restartable Dataproc job) and the dedup
# jobs the DAG submits. Both are the same entry point as on a laptop or a standalone cluster:
# streaming_job/submit.py with tidemark's CLI arguments.

resource "google_service_account" "spark" {
  account_id   = "${var.name_prefix}-spark"
  display_name = "tidemark: Dataproc nodes (stream and dedup jobs)"
}

resource "google_project_iam_member" "spark_dataproc_worker" {
  project = var.project
  role    = "roles/dataproc.worker"
  member  = google_service_account.spark.member
}

# Bucket-scoped storage roles: write the lake and the ops bucket (checkpoint, staging, temp), and
# the landing: the stream moves the files it has read to the archive prefix (a copy, then a delete
# of the landed object: `tidemark stream --archive`). legacyBucketReader: the GCS connector reads
# bucket metadata.
resource "google_storage_bucket_iam_member" "spark_lake" {
  for_each = toset(["roles/storage.objectAdmin", "roles/storage.legacyBucketReader"])
  bucket   = google_storage_bucket.lake.name
  role     = each.value
  member   = google_service_account.spark.member
}

resource "google_storage_bucket_iam_member" "spark_ops" {
  for_each = toset(["roles/storage.objectAdmin", "roles/storage.legacyBucketReader"])
  bucket   = google_storage_bucket.ops.name
  role     = each.value
  member   = google_service_account.spark.member
}

resource "google_storage_bucket_iam_member" "spark_landing" {
  for_each = toset(["roles/storage.objectUser", "roles/storage.legacyBucketReader"])
  bucket   = google_storage_bucket.landing.name
  role     = each.value
  member   = google_service_account.spark.member
}

# Job code: the spark-submit entry point, the tidemark wheel and the init action that installs it.
resource "google_storage_bucket_object" "submit_py" {
  name   = "code/submit.py"
  bucket = google_storage_bucket.ops.name
  source = "${path.module}/../streaming_job/submit.py"
}

resource "google_storage_bucket_object" "wheel" {
  name   = "code/${basename(var.tidemark_wheel)}"
  bucket = google_storage_bucket.ops.name
  source = "${path.module}/${var.tidemark_wheel}"
}

resource "google_storage_bucket_object" "init_action" {
  name   = "code/install-tidemark.sh"
  bucket = google_storage_bucket.ops.name
  source = "${path.module}/scripts/install-tidemark.sh"
}

# Nodes have internal IPs only. Google APIs (GCS, Pub/Sub) go through Private Google Access on the
# subnetwork; PyPI, for the init action, through this NAT.
resource "google_compute_router" "nat" {
  count   = var.create_nat ? 1 : 0
  name    = "${var.name_prefix}-router"
  region  = var.region
  network = var.dataproc_network
}

resource "google_compute_router_nat" "nat" {
  count                              = var.create_nat ? 1 : 0
  name                               = "${var.name_prefix}-nat"
  router                             = google_compute_router.nat[0].name
  region                             = var.region
  nat_ip_allocate_option             = "AUTO_ONLY"
  source_subnetwork_ip_ranges_to_nat = "ALL_SUBNETWORKS_ALL_IP_RANGES"

  log_config {
    enable = true
    filter = "ERRORS_ONLY"
  }
}

resource "google_dataproc_cluster" "spark" {
  #checkov:skip=CKV_GCP_91:Disks use Google-managed encryption; the data's system of record is the lake bucket. Add cluster_config.encryption_config.kms_key_name if your policy requires CMEK.
  name                          = "${var.name_prefix}-spark"
  region                        = var.region
  graceful_decommission_timeout = "120s"

  cluster_config {
    staging_bucket = google_storage_bucket.ops.name
    temp_bucket    = google_storage_bucket.ops.name

    gce_cluster_config {
      service_account        = google_service_account.spark.email
      service_account_scopes = ["cloud-platform"]
      internal_ip_only       = true
      subnetwork             = var.dataproc_subnetwork
      metadata = merge({
        tidemark-wheel         = "gs://${google_storage_bucket.ops.name}/${google_storage_bucket_object.wheel.name}"
        block-project-ssh-keys = "true"
        }, var.dedup_spark_connect ? {
        # The init action starts a Spark Connect server on the master (YARN) on this port.
        tidemark-spark-connect-port = tostring(var.spark_connect_port)
      } : {})
      tags = [local.spark_connect_tag]
      shielded_instance_config {
        enable_secure_boot          = true
        enable_vtpm                 = true
        enable_integrity_monitoring = true
      }
    }

    master_config {
      num_instances = 1
      machine_type  = var.dataproc_master_machine_type
      disk_config {
        boot_disk_size_gb = 100
      }
    }

    worker_config {
      num_instances = var.dataproc_workers
      machine_type  = var.dataproc_worker_machine_type
      disk_config {
        boot_disk_size_gb = 100
      }
    }

    software_config {
      image_version = var.dataproc_image_version
      # The GCS connector ships with the image (no --jars). Session time zone UTC: event_date is
      # the UTC date of a session's start (tidemark.base.spark sets it too; this covers other jobs).
      override_properties = {
        "spark:spark.sql.session.timeZone"                                = "UTC"
        "dataproc:dataproc.logging.stackdriver.job.driver.enable"         = "true"
        "dataproc:dataproc.logging.stackdriver.job.yarn.container.enable" = "true"
      }
    }

    initialization_action {
      script      = "gs://${google_storage_bucket.ops.name}/${google_storage_bucket_object.init_action.name}"
      timeout_sec = 600
    }

    endpoint_config {
      enable_http_port_access = false
    }
  }

  depends_on = [
    google_project_iam_member.spark_dataproc_worker,
    google_storage_bucket_iam_member.spark_ops,
    google_compute_router_nat.nat,
  ]
}

# The streaming job. Restartable: Dataproc restarts a failed driver (up to the limits below);
# the stream resumes from its checkpoint, and a replayed micro-batch rewrites the same receipt
# partitions (docs/lake-layout.md). Deleting or replacing this resource cancels the job; the next
# one picks up from the checkpoint.
resource "google_dataproc_job" "stream" {
  count        = var.run_stream_job ? 1 : 0
  region       = var.region
  force_delete = true

  placement {
    cluster_name = google_dataproc_cluster.spark.name
  }

  scheduling {
    max_failures_per_hour = 5
    max_failures_total    = 50
  }

  pyspark_config {
    main_python_file_uri = "gs://${google_storage_bucket.ops.name}/${google_storage_bucket_object.submit_py.name}"
    args = [
      "stream",
      "--landing", local.landing_uri,
      "--lake", local.lake_uri,
      "--checkpoint", local.checkpoint_uri,
      "--trigger-interval", var.stream_trigger_interval,
      # A bounded landing (docs/input-contract.md): read files move to the archive once their batch
      # is committed, and the file-source log starts afresh every stream_checkpoint_rotation
      # batches, so a micro-batch's listing and log follow the unread files, not the landing's age.
      "--archive", local.landing_archive_uri,
      "--checkpoint-rotation", tostring(var.stream_checkpoint_rotation),
      # No session rule options: the stream takes them from the lake's rules record (recorded at its
      # first start, changed only by `tidemark rules migrate`), like the dedup the DAG runs.
      "--notify-topic", google_pubsub_topic.availability.id,
    ]
    properties = {
      "spark.sql.session.timeZone" = "UTC"
      # A long-running stream keeps its executors; dynamic allocation would release them between
      # micro-batches only to ask again a minute later.
      "spark.dynamicAllocation.enabled" = "false"
      "spark.executor.instances"        = tostring(var.dataproc_workers)
    }
  }

  depends_on = [google_pubsub_topic_iam_member.stream_publisher]
}

# The warm Spark for the DAG's dedup (dedup_spark_connect): a Spark Connect server on the cluster's
# master, started by the init action (terraform/scripts/install-tidemark.sh) on YARN, so a dedup run
# is a client session of an already running driver instead of a Dataproc job that starts one. The
# server has no authentication of its own: only the subnetwork Composer is attached to may reach it.
locals {
  spark_connect_tag = "${var.name_prefix}-spark"
  # Dataproc names the master "<cluster>-m"; internal DNS resolves it inside the VPC.
  spark_connect_host = "${google_dataproc_cluster.spark.name}-m"
}

resource "google_compute_firewall" "spark_connect" {
  count       = var.dedup_spark_connect ? 1 : 0
  name        = "${var.name_prefix}-spark-connect"
  network     = var.dataproc_network
  description = "tidemark: Composer's workers to the Dataproc master's Spark Connect server"
  direction   = "INGRESS"
  allow {
    protocol = "tcp"
    ports    = [tostring(var.spark_connect_port)]
  }
  source_ranges = var.spark_connect_client_ranges
  target_tags   = [local.spark_connect_tag]
}
