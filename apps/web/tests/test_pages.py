from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import IntegrityError, transaction

from apps.accounts.models import ApiKey
from apps.ledger.models import EntryReason
from apps.ledger.services import funds_hold
from apps.ledger.tests.factories import PASSWORD, UserFactory, fund
from exchange.tests.html import amt


def test_sign_up_logs_the_trader_in(db, client):
    response = client.post("/signup/", {"username": "carol", "email": "", "password1": PASSWORD, "password2": PASSWORD})
    assert response.status_code == 302
    assert client.get("/wallet/").status_code == 200


def test_sign_up_errors_are_shown_next_to_the_field(db, client):
    response = client.post("/signup/", {"username": "carol", "password1": PASSWORD, "password2": "other"})
    assert response.status_code == 200
    assert "password2" in response.context["form"].errors


@pytest.mark.parametrize("page", ["/wallet/", "/activity/", "/api-keys/"])
def test_pages_need_a_log_in(db, client, page):
    response = client.get(page)
    assert response.status_code == 302
    assert response.url.startswith("/accounts/login/")


def test_log_in_and_out(db, client):
    UserFactory(username="dave")
    response = client.post("/accounts/login/", {"username": "dave", "password": PASSWORD})
    assert response.status_code == 302
    assert client.get("/wallet/").status_code == 200
    client.post("/accounts/logout/")
    assert client.get("/wallet/").status_code == 302


def test_wallet_shows_available_on_hold_and_total_at_the_display_precision(db, client, usdt, btc, user):
    usdt.display_decimals = 2
    usdt.save(update_fields=["display_decimals"])
    fund(user, usdt, "1234.567891")
    funds_hold(user_id=user.id, asset=usdt, amount=Decimal("30"), idempotency_key="order:1:hold")
    client.force_login(user)

    page = client.get("/wallet/").content.decode()

    assert ">On hold</th>" in page and "In orders" not in page
    # Cut (never rounded up) to 2 decimals, thousands separated; the exact amount in the tooltip.
    assert 'data-field="available"><span class="amount" title="1204.567891">1,204.56</span><' in page
    assert 'data-field="held"><span class="amount" title="30">30</span><' in page
    assert 'data-field="total"><span class="amount" title="1234.567891">1,234.56</span><' in page
    assert 'data-field="total"><span class="amount" title="0">0</span><' in page  # BTC: nothing, no "0E-8"


def test_wallet_balances_partial_for_htmx(db, client, usdt, user):
    fund(user, usdt, "5")
    client.force_login(user)
    partial = client.get("/wallet/", HTTP_HX_REQUEST="true").content.decode()
    assert partial.lstrip().startswith("<table>")
    assert amt("5") in partial


def test_activity_lists_each_posting_with_balance_after(db, client, usdt, user):
    fund(user, usdt, "100")
    funds_hold(
        user_id=user.id,
        asset=usdt,
        amount=Decimal("30"),
        idempotency_key="order:4:hold",
        reason=EntryReason.ORDER_HOLD,
        reference_type="order",
        reference_id="4",
    )
    client.force_login(user)
    page = client.get("/activity/").content.decode()
    assert "Order placed" in page
    assert amt("-30") in page and amt("70") in page
    assert "order 4" in page


def test_api_key_is_shown_once_and_can_be_revoked(db, client, user):
    client.force_login(user)

    page = client.post(
        "/api-keys/", {"name": "bot", "scopes": ["read", "trade"], "password": PASSWORD}
    ).content.decode()

    key = ApiKey.objects.get(user=user)
    assert key.scopes == ["read", "trade"]
    assert f"ex_{key.prefix}_" in page and 'id="new-key"' in page
    assert 'id="new-key"' not in client.get("/api-keys/").content.decode()
    client.post(f"/api-keys/{key.id}/revoke/")
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_a_trader_cannot_revoke_someone_elses_key(db, client, user):
    client.force_login(user)
    client.post("/api-keys/", {"name": "bot", "scopes": ["read"], "password": PASSWORD})
    key = ApiKey.objects.get(user=user)
    client.force_login(UserFactory())
    client.post(f"/api-keys/{key.id}/revoke/")
    key.refresh_from_db()
    assert key.revoked_at is None


def test_api_key_form_errors_are_shown_next_to_the_field(db, client, user):
    client.force_login(user)
    response = client.post("/api-keys/", {"name": "", "scopes": []}, follow=True)
    assert response.redirect_chain == [("/api-keys/", 302)]
    assert set(response.context["form"].errors) == {"name", "scopes"}
    assert not ApiKey.objects.exists()


def test_api_docs_render_without_a_cdn(db, client):
    page = client.get("/api/docs/").content.decode()
    assert "cdn" not in page.lower()
    assert client.get("/api/schema/").status_code == 200


@pytest.mark.parametrize("username", ["ǫa1", "Alice", "ALICE"])
def test_sign_up_refuses_look_alike_and_case_variant_usernames(db, client, username):
    UserFactory(username="alice")
    response = client.post("/signup/", {"username": username, "password1": PASSWORD, "password2": PASSWORD})
    assert response.status_code == 200
    assert "username" in response.context["form"].errors


@pytest.mark.parametrize(
    "path",
    [
        "/orders/99999999999999999999/cancel/",
        "/orders/9223372036854775808/cancel/",
        "/wallet/withdrawals/9223372036854775808/cancel/",
        "/api-keys/0/revoke/",
    ],
)
def test_ids_beyond_a_bigint_match_no_page(db, client, user, path):
    client.force_login(user)
    assert client.post(path).status_code == 404


def sign_up_answer(client, username: str, email: str) -> tuple:
    """What signing up shows: the status, where it leads, and the messages there (the address in them blanked)."""
    response = client.post(
        "/signup/", {"username": username, "email": email, "password1": PASSWORD, "password2": PASSWORD}
    )
    shown = [
        str(message).replace(email.lower(), "<address>") for message in client.get(response.url).context["messages"]
    ]
    client.logout()
    return response.status_code, response.url, shown


def test_sign_up_answers_alike_whether_or_not_another_account_has_the_e_mail_address(db, client):
    UserFactory(username="dave", email="dave@example.com")

    taken = sign_up_answer(client, "carol", "dave@example.com")
    free = sign_up_answer(client, "erin", "erin@example.com")

    assert taken == free
    assert taken[0] == 302
    assert "open the link in it within 48 hours" in taken[2][1]
    users = get_user_model().objects
    assert users.get(username="carol").email == users.get(username="erin").email == ""  # set only by the link


def test_two_users_cannot_share_an_e_mail_address_in_the_database(db):
    UserFactory(username="dave", email="dave@example.com")
    UserFactory(username="erin", email="")
    UserFactory(username="fred", email="")  # many users without an address
    with pytest.raises(IntegrityError), transaction.atomic():
        UserFactory(username="gina", email="Dave@example.com")


def test_sign_up_refuses_a_password_longer_than_the_api_accepts(db, client):
    long = "x7!" * 43  # 129 characters
    response = client.post("/signup/", {"username": "carol", "password1": long, "password2": long})

    assert response.status_code == 200
    assert "at most 128 characters" in str(response.context["form"].errors)
    assert not get_user_model().objects.filter(username="carol").exists()
    fits = long[:128]
    assert client.post("/signup/", {"username": "carol", "password1": fits, "password2": fits}).status_code == 302


def test_sign_ups_are_rate_limited_per_client_ip(db, client, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "signup": "2/hour"},
    }
    address, another = "203.0.113.9", "203.0.113.10"
    cache.delete_many([f"throttle:signup:{address}", f"throttle:signup:{another}"])  # counts of an earlier run

    def sign_up(username: str) -> int:
        sent = {"username": username, "password1": PASSWORD, "password2": PASSWORD}
        status = client.post("/signup/", sent, REMOTE_ADDR=address).status_code
        client.logout()
        return status

    assert [sign_up("carol"), sign_up("dave"), sign_up("erin")] == [302, 302, 429]
    assert not get_user_model().objects.filter(username="erin").exists()
    assert client.post("/signup/", {"username": "erin"}, REMOTE_ADDR=another).status_code == 200
