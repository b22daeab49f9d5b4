# Providers and their versions. No backend block: pass one at init time, e.g.
#   terraform init -backend-config="bucket=<state bucket>" -backend-config="prefix=tidemark"
# with a `backend "gcs" {}` override file, or keep the local state for a trial (docs/production.md).
terraform {
  required_version = ">= 1.5"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 6.10, < 8"
    }
    archive = {
      source  = "hashicorp/archive"
      version = ">= 2.4, < 3"
    }
  }
}

provider "google" {
  project = var.project
  region  = var.region

  default_labels = merge({ app = "tidemark" }, var.labels)
}
