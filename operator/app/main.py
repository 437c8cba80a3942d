"""`railyard operator`: run the Kopf operator (standalone, all namespaces)."""

from __future__ import annotations

import asyncio
import logging
import os


def run_operator(verbose: bool = False) -> int:
    import kopf
    from kopf._core.engines.peering import Identity  # a NewType of str Kopf does not re-export
    from railyard.operator.app.handlers import new_memo
    from railyard.operator.base.settings import Settings, SettingsError, unknown_variables

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Kopf logs every handled event at INFO; at 20k pods that is noise and measurable CPU.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    # Each replica runs standalone; the Lease (not Kopf peering) decides who places.
    log = logging.getLogger("railyard.operator")
    try:
        settings = Settings.from_env()
    except SettingsError as e:
        log.error("bad setting %s", e)
        return 2
    for name in unknown_variables(os.environ):
        log.warning("%s is no Railyard setting (docs/operations.md#operator-settings); ignored", name)
    liveness = f"http://0.0.0.0:{settings.health.port}/healthz" if settings.health.port > 0 else None
    # Our own identity: Kopf's default asks the passwd database, which has no entry for an arbitrary
    # runAsUser (the chart's 65532, or a platform-assigned uid) and crashes at start.
    asyncio.run(kopf.operator(standalone=True, clusterwide=True, memo=new_memo(settings),
                              liveness_endpoint=liveness, identity=Identity(settings.leader.identity)))
    return 0
