"""Admin query parameters with a NUL character: 400 with the reason, never a 500 (a break-it review found 500s)."""

import pytest

from apps.backoffice.parameters import NUL_REFUSED, PARAMETERS_REFUSED
from apps.backoffice.tests.logins import login_with_second_factor

LIST_FILTERS = [
    "/admin/backoffice/feechange/?kind=",
    "/admin/backoffice/feechange/?status=",
    "/admin/backoffice/adjustment/?status=",
    "/admin/audit/auditlogentry/?action=",
    "/admin/orders/order/?status=",
    "/admin/orders/order/?time_in_force=",
    "/admin/orders/market/?status=",
    "/admin/wallets/withdrawal/?status=",
    "/admin/wallets/deposit/?status=",
    "/admin/wallets/custodyevent/?status=",
    "/admin/ledger/account/?kind=",
    "/admin/ledger/journalentry/?reason=",
    "/admin/ledger/posting/?account__kind=",
]


@pytest.mark.parametrize("url", LIST_FILTERS)
def test_a_nul_in_an_admin_list_filter_is_refused_with_400(client, approver, url):
    login_with_second_factor(client, approver)
    assert client.get(url + "draft").status_code == 200  # the filter itself works

    for query in ("%00", "a%00b"):
        response = client.get(url + query)
        assert (response.status_code, response.content.decode()) == (400, NUL_REFUSED)
    name = url.rsplit("?", 1)[0] + "?st%00atus=open"
    assert client.get(name).status_code == 400


def test_a_nul_outside_the_admin_is_left_to_the_page(client, approver):
    """The middleware answers for the admin only: the API words the refusal per field itself."""
    client.force_login(approver)
    response = client.get("/api/v1/orders/?status=%00")
    assert response.status_code == 400 and response.json()["error"]["fields"].keys() == {"status"}


@pytest.mark.parametrize(
    "url",
    [
        "/admin/orders/order/?id__regex=(",
        "/admin/ledger/journalentry/?id__iregex=[",
        "/admin/orders/trade/?id__range=1",
        "/admin/orders/order/?created_at__year=0",
        "/admin/orders/order/?created_at__year=10000",
        "/admin/ledger/journalentry/?created_at__iso_year=0",
        "/admin/orders/order/?created_at__year=9999&created_at__month=12&created_at__day=31",
        "/admin/orders/trade/?created_at__year=99999999999999999999",
        "/admin/orders/trade/%00/change/",
        "/admin/ledger/signingkey/1%00/change/",
    ],
)
def test_a_lookup_an_id_or_a_date_postgresql_cannot_take_is_refused_with_400(client, approver, url):
    """A break-it review found each of these a 500 (DataError, IndexError, ValueError, OverflowError)."""
    login_with_second_factor(client, approver)
    response = client.get(url)
    if response.status_code == 302:  # the admin's own refusal of a lookup it can judge (an empty list here)
        assert response.url.endswith("?e=1"), url
    else:
        assert (response.status_code, response.content.decode()) == (400, PARAMETERS_REFUSED), url


@pytest.mark.parametrize("selected", ["a", "1.5", "", "1\x00"])
def test_an_action_given_ids_that_are_not_ids_is_refused_with_400(client, approver, selected):
    login_with_second_factor(client, approver)
    for url, action in (("/admin/orders/order/", "cancel_orders"), ("/admin/orders/market/", "halt")):
        response = client.post(url, {"action": action, "_selected_action": [selected], "confirm": "yes", "reason": "x"})
        assert response.status_code in (302, 400), (url, selected, response.status_code)
        if response.status_code == 400:
            assert response.content.decode() == PARAMETERS_REFUSED
