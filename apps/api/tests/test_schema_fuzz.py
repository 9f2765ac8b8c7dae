"""Schemathesis over the whole OpenAPI schema: no 500, no response that breaks the schema.

It generates requests for every operation (valid and invalid), sends them to the
real Django application in-process (WSGI) against the real database, and checks
the answers. New endpoints are covered as soon as they are in the schema.
"""

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.checks import not_a_server_error

from apps.ledger.tests.factories import AssetFactory, UserFactory, fund


@pytest.fixture(autouse=True)
def keep_the_test_connection():
    """As Django's test client does: keep the test's connection (and its transaction) across requests."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def trader_headers(db, key_for):
    """A funded trader with a key of every scope."""
    usdt = AssetFactory(code="USDT", name="Tether", decimals=6)
    trader = UserFactory()
    fund(trader, usdt, "1000")
    return {"Authorization": f"Token {key_for(trader, 'read', 'trade', 'withdraw')}"}


schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors_and_responses_match_the_schema(case, trader_headers):
    case.call_and_validate(
        headers=trader_headers,
        checks=[not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance],
    )
