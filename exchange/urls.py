from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from .health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path(settings.ADMIN_URL, admin.site.urls),
    path("custody/callbacks/", include("apps.wallets.urls")),
]
