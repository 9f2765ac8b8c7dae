"""NUL bytes and other characters no name holds are 4xx on the web UI, never a 500 (hole 6)."""

import pytest
from django.http import QueryDict

from apps.ledger.tests.factories import UserFactory, fund
from apps.orders.models import Order
from apps.web.forms import ApiKeyForm

from .test_markets import order_form


@pytest.fixture
def trader(client, btc_usdt, usdt):
    trader = UserFactory()
    fund(trader, usdt, "10000")
    client.force_login(trader)
    return trader


@pytest.mark.parametrize("path", ["/markets/BTC%00USDT/", "/markets/%00/", "/markets/BTC-USDT%00/"])
def test_a_nul_byte_in_a_market_symbol_is_a_404(trader, client, path):
    assert client.get(path).status_code == 404


def test_a_nul_byte_in_the_market_of_the_order_form_is_a_404(trader, client):
    assert client.post("/markets/BTC%00USDT/orders/", order_form()).status_code == 404


@pytest.mark.parametrize("field", ["side", "type", "price", "qty", "time_in_force", "client_order_id"])
def test_a_nul_byte_in_an_order_form_field_is_refused_on_the_form(trader, client, field):
    """Refused, never a 500: post/redirect/get back to the market page, the field named, nothing placed."""
    response = client.post("/markets/BTC-USDT/orders/", order_form(**{field: "1\x00"}), follow=True)
    assert response.redirect_chain == [("/markets/BTC-USDT/", 302)]
    assert response.status_code == 200
    assert field in response.context["form"].errors
    assert not Order.objects.exists()


@pytest.mark.parametrize("asset", ["\x00", "USDT\x00", "U" * 5000])
def test_a_nul_byte_in_the_activity_filter_is_a_400(trader, client, asset):
    response = client.get("/activity/", {"asset": asset})
    assert response.status_code == 400
    assert "Not a valid asset" in response.content.decode()


def test_the_activity_filter_still_filters(trader, client):
    page = client.get("/activity/", {"asset": "USDT"})
    assert page.status_code == 200


@pytest.mark.parametrize("field, values", [("side", ["buy", "sell"]), ("qty", ["0.01", "0.5"])])
def test_an_order_form_field_sent_twice_is_refused_not_the_last_one_taken(trader, client, field, values):
    """Break-it review: ``side=buy&side=sell`` placed a sell order (Django's forms read the last value), while the
    API refuses a repeated field (``duplicate_field``)."""
    form = order_form()
    form[field] = values

    response = client.post("/markets/BTC-USDT/orders/", form, follow=True)

    assert response.redirect_chain == [("/markets/BTC-USDT/", 302)]
    assert response.context["form"].errors[field] == ["This field was sent more than once: send it once."]
    assert not Order.objects.exists()


def test_a_filter_given_twice_is_refused(trader, client):
    response = client.get("/activity/?asset=USDT&asset=BTC")
    assert response.status_code == 400
    assert "sent more than once" in response.content.decode()


def test_a_field_taking_several_values_still_takes_them():
    """A multiple choice (the API key's scopes) is no repeated field."""
    form = ApiKeyForm(data=QueryDict("name=bot&scopes=read&scopes=trade&name=other"))

    form.is_valid()

    assert "scopes" not in form.errors and form.cleaned_data["scopes"] == ["read", "trade"]
    assert form.errors["name"] == ["This field was sent more than once: send it once."]


def test_the_admins_multiple_selects_still_take_several_values(admin_client):
    """Break-it review: the admin wraps its selects (``RelatedFieldWidgetWrapper``), which hid that they take several
    values, so a user could not be given two groups."""
    from django.contrib.auth.models import Group

    user = UserFactory(username="erin")
    groups = [Group.objects.get(name="operators"), Group.objects.get(name="approvers")]
    page = admin_client.get(f"/admin/auth/user/{user.id}/change/")
    form = page.context["adminform"].form
    data = QueryDict(mutable=True)
    for name, value in form.initial.items():
        if value is not None and name not in ("groups", "user_permissions", "password", "last_login", "date_joined"):
            data[name] = value
    data.update({"date_joined_0": "2026-01-01", "date_joined_1": "00:00:00"})
    data.setlist("groups", [str(group.id) for group in groups])

    saved = admin_client.post(f"/admin/auth/user/{user.id}/change/", dict(data.lists()))

    assert saved.status_code == 302, saved.context["adminform"].form.errors
    assert set(user.groups.all()) == set(groups)
