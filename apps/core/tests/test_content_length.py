"""A Content-Length that is not a number: 400 with the reason on every kind of page, never a 500."""

import pytest

from apps.core.content_length import CONTENT_LENGTH_REFUSED


@pytest.mark.parametrize("path", ["/accounts/login/", "/api/v1/orders/", "/api/v3/order", "/custody/callbacks/"])
@pytest.mark.parametrize("length", ["abc", "-1", "1.5", "١٢"])
def test_a_content_length_that_is_not_a_number_is_refused(db, client, path, length):
    """A break-it review: the log-in form read the body and Django's int() of the header raised (a 500)."""
    response = client.generic("POST", path, "a=1", "application/x-www-form-urlencoded", CONTENT_LENGTH=length)
    assert (response.status_code, response.content.decode()) == (400, CONTENT_LENGTH_REFUSED)


def test_a_numeric_content_length_reaches_the_page(db, client):
    response = client.post("/accounts/login/", {"username": "nobody", "password": "x"})
    assert response.status_code == 200 and b"id_username" in response.content
