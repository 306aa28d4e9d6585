"""inferline's Grafana dashboards as code (Grafana Labs' grafana-foundation-sdk).

One module per dashboard (``pipeline``, ``scale_out``, ``gpu``), the house style of its panels
(``panels``), what every dashboard shares (``base``: tags, links, rows, ids), its variables
(``variables``: datasource, cluster, namespace, model) and the PromQL selectors that apply them
(``promql``). ``python -m grafana.dashboards_src`` (``make dashboards``) writes
grafana/dashboards/*.json, which stay committed: provisioning, the local stack and Kubernetes
read the JSON, and a test fails while a file differs from what the Python renders.
"""
