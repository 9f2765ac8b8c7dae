"""The users' admin screen refuses another user's e-mail address on the form, never with a database error."""

from django.contrib.auth import get_user_model

from apps.ledger.tests.factories import UserFactory


def test_an_operator_cannot_give_a_user_another_users_email(admin_client):
    UserFactory(username="taken", email="Alice@Example.com")
    user = UserFactory(username="changed", email="changed@example.com")
    form = {
        "username": "changed",
        "email": "alice@example.COM",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
    }
    response = admin_client.post(f"/admin/auth/user/{user.pk}/change/", form)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["email"] == ["This e-mail address is already in use."]
    assert get_user_model().objects.get(pk=user.pk).email == "changed@example.com"


def test_an_operator_can_keep_a_users_own_email_in_another_case(admin_client):
    user = UserFactory(username="kept", email="kept@example.com")
    form = {"username": "kept", "email": "KEPT@example.com", "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00"}
    response = admin_client.post(f"/admin/auth/user/{user.pk}/change/", form)
    assert response.status_code == 302, response.context["adminform"].form.errors if response.context else ""
    assert get_user_model().objects.get(pk=user.pk).email == "KEPT@example.com"
