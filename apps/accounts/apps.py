from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"
    verbose_name = "Traders and API keys"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from .authenticators import authenticators_watch
        from .events import second_factor_changed
        from .notifications import login_notify
        from .session_idle import session_activity_start
        from .session_second_factor import second_factor_epoch_bump, session_second_factor_bind
        from .sessions import session_end_fix

        user_logged_in.connect(login_notify, dispatch_uid="accounts.login_notify")
        user_logged_in.connect(session_end_fix, dispatch_uid="accounts.session_end_fix")
        user_logged_in.connect(session_activity_start, dispatch_uid="accounts.session_activity_start")
        user_logged_in.connect(session_second_factor_bind, dispatch_uid="accounts.session_second_factor_bind")
        authenticators_watch()
        second_factor_changed.connect(second_factor_epoch_bump, dispatch_uid="accounts.second_factor_epoch_bump")
