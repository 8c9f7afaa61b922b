"""test_fuzz.py's fuzzing in depth, in the heavy tier: every phase, the coverage phase's
boundary and negative cases included, and ``MAX_EXAMPLES`` generated requests per operation.

The default tier fuzzes every operation with a few examples (test_fuzz.py); this module is not
even imported under ``-m "not heavy"`` (schemathesis builds the coverage cases at collection).
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis

from tests.api.conftest import FuzzTarget
from tests.api.test_fuzz import check_case, fuzz_settings, schema
from tests.api.test_fuzz import sqlite_fuzz_target as sqlite_fuzz_target  # the module's app

# ≈ 35 s of CPU beyond the default tier's fuzzing (issue 27 §5); CI runs it in make test-heavy.
pytestmark = pytest.mark.heavy


@schema.parametrize()
@fuzz_settings
def test_api_conforms_to_its_spec_in_depth(
    case: schemathesis.Case[Any], sqlite_fuzz_target: FuzzTarget
) -> None:
    check_case(case, sqlite_fuzz_target.client, sqlite_fuzz_target.keys)
