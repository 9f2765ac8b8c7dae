from django.apps import AppConfig


class BackofficeConfig(AppConfig):
    name = "apps.backoffice"
    label = "backoffice"
    verbose_name = "Back office"

    def ready(self) -> None:
        """Audit log-ins, failed log-ins and second-factor enrolments (:mod:`apps.backoffice.login_audit`) and the
        assets operators create or change (:mod:`apps.backoffice.asset_audit`); register the reconciliation check of
        manual adjustments (:mod:`apps.backoffice.checks`)."""
        from django.contrib.auth.signals import user_logged_in, user_login_failed
        from django.db.models.signals import post_save
        from django_otp import device_classes

        from apps.ledger.events import asset_saved

        from . import checks  # noqa: F401  (registers invariant 8's backing of adjustment entries)
        from .asset_audit import record_asset_saved
        from .login_audit import record_login, record_login_failed, record_second_factor_enrolment

        user_logged_in.connect(record_login, dispatch_uid="backoffice.audit.login")
        user_login_failed.connect(record_login_failed, dispatch_uid="backoffice.audit.login_failed")
        asset_saved.connect(record_asset_saved, dispatch_uid="backoffice.audit.asset_saved")
        for device_class in device_classes():
            post_save.connect(
                record_second_factor_enrolment,
                sender=device_class,
                dispatch_uid=f"backoffice.audit.enrol.{device_class._meta.label_lower}",
            )
