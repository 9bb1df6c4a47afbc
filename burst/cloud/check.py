"""`burst target check`: before a target is trusted, read what the provision step will need of it,
without changing anything: the credentials work and reach the cluster, the pool calls are allowed
(listing burst's own pools), and the cloud's GPU quotas hold the smallest shape the policies allow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from burst.cloud.provider import ProviderError
from burst.model import Offer

if TYPE_CHECKING:
    from burst.config import Config, TargetSpec


@dataclass(frozen=True)
class Finding:
    target: str
    what: str
    ok: bool | None  # None: not checked on this cloud
    detail: str


def check_target(name: str, provider: Any, owner: str, offers: Sequence[Offer]) -> list[Finding]:
    """What can be read of one target, a Finding per step; a failing step never stops the next."""
    findings: list[Finding] = []

    def step(what: str, read: Callable[[], tuple[bool, str]]) -> None:
        try:
            ok, detail = read()
        except ProviderError as exc:
            ok, detail = False, exc.message
        findings.append(Finding(name, what, ok, detail))

    step("cluster", provider.cluster_state)
    if findings[-1].ok is False:
        return findings  # nothing more can be read without the cluster
    step("node pools", lambda: (True, f"{len(provider.list_pools(owner))} of burst's listed"))
    quotas = getattr(provider, "gpu_quotas", None)
    if quotas is None:
        findings.append(Finding(name, "GPU quota", None, "not read on this cloud"))
    elif not offers:
        findings.append(Finding(name, "GPU quota", None, "no offer the policies allow here"))
    else:
        try:
            for ok, detail in quotas(list(offers)):
                findings.append(Finding(name, "GPU quota", ok, detail))
        except ProviderError as exc:
            findings.append(Finding(name, "GPU quota", False, exc.message))
    return findings


def allowed_offers(target: TargetSpec, config: Config, catalog: Iterable[Offer]) -> list[Offer]:
    """The catalog's offers in the target's region for the GPUs the policies placing on it name
    (all of the region's when one of them names none; none when no policy places there)."""
    here = [o for o in catalog if o.cloud == target.cloud and o.region == target.region]
    names: set[str] = set()
    for policy in config.policies.values():
        placement = policy.spec.placement
        if target.name not in placement.targets:
            continue
        if not placement.accelerators:
            return here
        for want, subs in placement.accelerators.items():
            names |= {want, *subs}
    return [o for o in here if o.accelerator in names]
