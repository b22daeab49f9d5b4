# Alert policies: one per SLO alert of ops/prometheus/rules.yml (docs/metrics.md), read from that
# file so that the local Prometheus and Cloud Monitoring alert on the same expressions under the same
# names. The metrics reach Cloud Monitoring through Managed Service for Prometheus (scraping
# `tidemark exporter` and `tidemark stream --metrics-port`) or an OpenTelemetry collector fed by
# OTLP (OTEL_EXPORTER_OTLP_ENDPOINT); either keeps the Prometheus names the rules use, so the
# conditions are PromQL.

locals {
  slo_rules = {
    for rule in yamldecode(file("${path.module}/../ops/prometheus/rules.yml")).groups[0].rules :
    rule.alert => rule
  }
}

resource "google_monitoring_alert_policy" "slo" {
  for_each     = local.slo_rules
  display_name = "${var.name_prefix} ${each.key}"
  combiner     = "OR"
  severity     = each.value.labels.severity == "page" ? "CRITICAL" : "WARNING"

  conditions {
    display_name = "${each.key} (SLO ${each.value.labels.slo})"
    condition_prometheus_query_language {
      query               = each.value.expr
      duration            = try(each.value["for"], "0s")
      evaluation_interval = var.alert_evaluation_interval
      alert_rule          = each.key
      rule_group          = "tidemark-slo"
      labels              = each.value.labels
    }
  }

  documentation {
    subject   = "tidemark: ${each.key}"
    content   = "SLO ${each.value.labels.slo} breached. Runbook: ${each.value.annotations.runbook} in the tidemark repository."
    mime_type = "text/markdown"
  }

  notification_channels = var.alert_notification_channels
  user_labels           = var.labels
  depends_on            = [google_project_service.apis]
}

# The Cloud Function's outcomes as a metric without code in its bundle: every log line of its
# handler carries `outcome` (triggered, already_exists, rejected, retry: cloud_function/main.py), a
# jsonPayload field in Cloud Logging; this counts them by outcome
# (logging.googleapis.com/user/tidemark_function_notices in Cloud Monitoring).
resource "google_logging_metric" "function_notices" {
  name   = "tidemark_function_notices"
  filter = "resource.type=\"cloud_run_revision\" AND resource.labels.service_name=\"${var.function_name}\" AND jsonPayload.outcome:*"
  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "INT64"
    unit         = "{notice}"
    display_name = "tidemark function: notices by outcome"
    labels {
      key         = "outcome"
      value_type  = "STRING"
      description = "triggered, already_exists, rejected or retry"
    }
  }
  label_extractors = {
    outcome = "EXTRACT(jsonPayload.outcome)"
  }
  depends_on = [google_project_service.apis]
}
