from django.conf import settings
from django.contrib import admin
from django.urls import path

from .health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path(settings.ADMIN_URL, admin.site.urls),
]
