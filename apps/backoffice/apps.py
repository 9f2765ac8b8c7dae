from django.apps import AppConfig


class BackofficeConfig(AppConfig):
    name = "apps.backoffice"
    label = "backoffice"
    verbose_name = "Back office"
