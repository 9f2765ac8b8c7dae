from django.contrib.auth import views as auth_views
from django.urls import path, register_converter

from exchange.converters import ObjectIdConverter

from . import address_book, login, markets, passwords, security, views

register_converter(ObjectIdConverter, "id")

app_name = "web"

urlpatterns = [
    path("", views.home, name="home"),
    path("signup/", views.signup, name="signup"),
    path("wallet/", views.wallet, name="wallet"),
    path("wallet/deposit-address/", views.deposit_address, name="deposit-address"),
    path("wallet/withdraw/", views.withdraw, name="withdraw"),
    path("wallet/withdraw/fee/", views.withdraw_fee, name="withdraw-fee"),
    path("wallet/withdrawals/<id:withdrawal_id>/cancel/", views.withdrawal_cancel_view, name="withdrawal-cancel"),
    path("wallet/addresses/", views.withdrawal_address_add_view, name="withdrawal-address-add"),
    path(
        "wallet/addresses/<id:entry_id>/delete/",
        address_book.withdrawal_address_delete_view,
        name="withdrawal-address-delete",
    ),
    path(
        "wallet/addresses/confirm/<str:token>/",
        address_book.withdrawal_address_confirm_view,
        name="withdrawal-address-confirm",
    ),
    path("wallet/withdrawals/confirm/<str:token>/", address_book.withdrawal_confirm_view, name="withdrawal-confirm"),
    path("security/", security.security, name="security"),
    path("security/email/", security.email_change_view, name="email-change"),
    path("security/email/cancel/", security.email_change_cancel_view, name="email-change-cancel"),
    path("email/confirm/<str:token>/", security.email_confirm_view, name="email-confirm"),
    path("email/approve/<str:token>/", security.email_approve_view, name="email-approve"),
    path("security/second-factor/", security.second_factor_start, name="second-factor-start"),
    path("security/second-factor/confirm/", security.second_factor_confirm_view, name="second-factor-confirm"),
    path("security/second-factor/remove/", security.second_factor_remove_view, name="second-factor-remove"),
    path("markets/", markets.markets, name="markets"),
    path("markets/<str:symbol>/", markets.market, name="market"),
    path("markets/<str:symbol>/orders/", markets.order_place_view, name="order-place"),
    path("orders/<id:order_id>/cancel/", markets.order_cancel_view, name="order-cancel"),
    path("activity/", views.activity, name="activity"),
    path("activity/export/", views.activity_export, name="activity-export"),
    path("orders/export/", views.orders_export, name="orders-export"),
    path("fills/export/", views.fills_export, name="fills-export"),
    path("wallet/deposits/export/", views.deposits_export, name="deposits-export"),
    path("wallet/withdrawals/export/", views.withdrawals_export, name="withdrawals-export"),
    path("api-keys/", views.api_keys, name="api-keys"),
    path("api-keys/<id:key_id>/revoke/", views.api_key_revoke_view, name="api-key-revoke"),
]

auth_urlpatterns = [
    path("login/", login.LoginView.as_view(), name="login"),
    path("login/second-factor/", login.login_second_factor, name="login-second-factor"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password/change/", passwords.PasswordChangeView.as_view(), name="password-change"),
    path("password/reset/", passwords.PasswordResetView.as_view(), name="password-reset"),
    path("password/reset/sent/", passwords.PasswordResetSentView.as_view(), name="password-reset-sent"),
    path(
        "password/reset/<uidb64>/<token>/",
        passwords.PasswordResetConfirmView.as_view(),
        name="password-reset-confirm",
    ),
]
