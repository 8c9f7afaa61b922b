"""The asyncio client: concurrent fits on two datasets, waited on together."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from privfit_client import AsyncClient, BudgetExhausted

from tests.client.conftest import NO_WAIT, SPEC_PATH, SiteAccount, small_csv
from tests.support.live_server import LiveServer


def test_concurrent_fits_are_waited_on_together(
    server: LiveServer, site: SiteAccount, adult_train_csv: Path
) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.base_url, site.key, retry=NO_WAIT) as pf:
            uploads = [small_csv(adult_train_csv, 1500, skip=1500 * i) for i in range(2)]
            datasets = await asyncio.gather(*(pf.upload(data, SPEC_PATH) for data in uploads))
            jobs = await asyncio.gather(
                *(pf.fit(d.id, epsilon=0.5, regularization=1e-2) for d in datasets)
            )
            finished = await asyncio.gather(*(job.wait() for job in jobs))
            assert [job.status for job in finished] == ["succeeded", "succeeded"]
            model = await finished[0].model()
            assert model.dataset_id == datasets[0].id
            budgets = await asyncio.gather(*(pf.budget(d.id) for d in datasets))
            assert [b.epsilon_spent for b in budgets] == [0.5, 0.5]
            with pytest.raises(BudgetExhausted):
                await pf.fit(datasets[0].id, epsilon=100.0, regularization=1e-2)

    asyncio.run(scenario())
