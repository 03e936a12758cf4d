"""Prometheus exporters: the master-side client metrics, the NVML GPU sidecar, and scraping."""
