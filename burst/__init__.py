"""burst: bursts pending GPU workloads from an on-prem Kubernetes cluster to cloud GPU node pools."""

__version__ = "0.1.0"
