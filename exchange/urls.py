from django.conf import settings
from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from apps.backoffice.second_factor import admin_login, admin_password_change, second_factor
from apps.binance.endpoint import unsupported
from apps.web.urls import auth_urlpatterns

from .health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path(f"{settings.ADMIN_URL}second-factor/", second_factor, name="second-factor"),
    path(f"{settings.ADMIN_URL}login/", admin_login, name="admin-login"),  # before the admin's own (same path)
    path(f"{settings.ADMIN_URL}password_change/", admin_password_change, name="admin-password-change"),
    path(settings.ADMIN_URL, admin.site.urls),
    path("custody/callbacks/", include("apps.wallets.urls")),
    path("api/v1/", include("exchange.api_urls")),
    path("api/v3/", include("apps.binance.urls")),
    # Where README's CCXT configuration points Binance's other products (sapi, fapi, ...): -1020 "not supported".
    re_path(r"^not-served/", unsupported),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("accounts/", include(auth_urlpatterns)),
    path("proofs/", include("apps.proofs.urls")),
    path("", include("apps.web.urls")),
]
