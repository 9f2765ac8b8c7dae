"""Included at ``custody/callbacks/`` by ``exchange/urls.py``."""

from django.urls import path

from . import views

urlpatterns = [path("", views.custody_callback, name="custody-callback")]
