from django.apps import AppConfig


class WalletsConfig(AppConfig):
    name = "apps.wallets"
    label = "wallets"
    verbose_name = "Wallets and custody"
