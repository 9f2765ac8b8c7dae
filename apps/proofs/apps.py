from django.apps import AppConfig


class ProofsConfig(AppConfig):
    name = "apps.proofs"
    label = "proofs"
    verbose_name = "Proof of liabilities"
