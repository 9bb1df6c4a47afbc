"""The admins' configuration, the noun every step is handed: the YAML documents as strict models
(documents), reading and cross-checking them with file:line errors (load, yamlsource), and which
workloads a policy's selector claims (selectors)."""

from burst.config.documents import (
    DEFAULT_DATABASE_URL,
    Budget,
    BurstPolicy,
    CatalogOverrides,
    DatabaseSpec,
    ExcludeRule,
    KubernetesAccess,
    PriceOverride,
    Replication,
    SelectorRequirement,
    ServiceConfig,
    TargetSpec,
    Trigger,
    WorkloadSelector,
)
from burst.config.load import Config, ConfigError, Problem, Vocabulary, load
from burst.config.selectors import selector_matches, selectors_overlap

__all__ = [
    "DEFAULT_DATABASE_URL",
    "Budget",
    "BurstPolicy",
    "CatalogOverrides",
    "Config",
    "ConfigError",
    "DatabaseSpec",
    "ExcludeRule",
    "KubernetesAccess",
    "PriceOverride",
    "Problem",
    "Replication",
    "SelectorRequirement",
    "ServiceConfig",
    "TargetSpec",
    "Trigger",
    "Vocabulary",
    "WorkloadSelector",
    "load",
    "selector_matches",
    "selectors_overlap",
]
