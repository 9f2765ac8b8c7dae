from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "apps.demo"
    label = "demo"
    verbose_name = "Demo data and the market-making bot"
