"""The office's metrics (roles/office_metrics): what Prometheus scrapes, read from the inventory."""
