"""Every federated protocol either fits a label task or refuses it with a reason (issue 29):
each (protocol, task) pair outside ``PROTOCOL_TASKS`` has a refusal text in ``TASK_REFUSALS``
that says what the protocol's analysis is derived for, never a promise ("not yet"), and
``federated_calibrate`` refuses it with that text (a ``ValueError``: 422, nothing charged)."""

from __future__ import annotations

import pytest

from service.dp.core.tasks import TASKS
from service.dp.federated import (
    FEDERATED_PROTOCOLS,
    PROTOCOL_TASKS,
    TASK_REFUSALS,
    federated_calibrate,
)

PAIRS = [
    (protocol, task)
    for protocol in FEDERATED_PROTOCOLS
    for task in TASKS
    if task not in PROTOCOL_TASKS[protocol]
]


def test_every_refused_pair_has_a_reason_and_no_promise() -> None:
    assert PAIRS  # the binary-only protocols exist
    for protocol, task in PAIRS:
        reason = TASK_REFUSALS[protocol][task]
        assert len(reason) > 40
        for promise in ("not yet", "not built", "later", "planned"):
            assert promise not in reason, (protocol, task)
    # nothing explains a refusal that does not happen
    for protocol, reasons in TASK_REFUSALS.items():
        assert not set(reasons) & PROTOCOL_TASKS[protocol]


@pytest.mark.parametrize(("protocol", "task"), PAIRS)
def test_the_calibration_refuses_the_pair_with_its_reason(protocol: str, task: str) -> None:
    with pytest.raises(ValueError) as caught:
        federated_calibrate(
            protocol,
            site_sizes=[100, 100],
            d=3,
            epsilon=1.0,
            delta=1e-6,
            regularization=0.05,
            task=task,  # type: ignore[arg-type]
        )
    assert TASK_REFUSALS[protocol][task] in str(caught.value)
