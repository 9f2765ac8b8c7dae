from django.apps import AppConfig


class ProofsConfig(AppConfig):
    name = "apps.proofs"
    label = "proofs"
    verbose_name = "Proof of liabilities"

    def ready(self) -> None:
        from apps.ledger.seal.verification import register_signed_references

        from .selectors import snapshot_references

        # journal_verify (and reconcile's invariant 9) check every snapshot against the chain and the pinned keys.
        register_signed_references(snapshot_references)
