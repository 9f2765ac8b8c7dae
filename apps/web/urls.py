from django.contrib.auth import views as auth_views
from django.urls import path

from . import views

app_name = "web"

urlpatterns = [
    path("", views.home, name="home"),
    path("signup/", views.signup, name="signup"),
    path("wallet/", views.wallet, name="wallet"),
    path("activity/", views.activity, name="activity"),
    path("api-keys/", views.api_keys, name="api-keys"),
    path("api-keys/<int:key_id>/revoke/", views.api_key_revoke_view, name="api-key-revoke"),
]

auth_urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
]
