"""The office metrics' hook (provision/products.py): the function its role's Prometheus template calls."""

from provision.products import Product

PRODUCT = Product(template_functions={
    "office_metrics_prometheus_config": "provision.office_metrics.targets:office_metrics_prometheus_config",
})
