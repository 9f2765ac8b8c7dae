from django.apps import AppConfig


class CustodySimulatorConfig(AppConfig):
    """The simulated custody provider's tables (see the package docstring)."""

    name = "apps.wallets.custody.simulator"
    label = "custody_simulator"
    verbose_name = "Simulated custody provider"
    default_auto_field = "django.db.models.BigAutoField"
