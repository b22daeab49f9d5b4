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
