"""The back office's screen of users: Django's own, with e-mail addresses unique whatever their case, as the
sign-up form holds them, so a duplicate is a form error on the field, never a database error."""

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import UserChangeForm

from apps.accounts.selectors import EMAIL_IN_USE, email_in_use
from apps.core.single_valued import SingleValuedForm


class OperatorUserChangeForm(SingleValuedForm, UserChangeForm):
    """Django's user form; ``email`` must be no other user's (:func:`apps.accounts.selectors.email_in_use`)."""

    def clean_email(self) -> str:
        email = self.cleaned_data["email"]
        if email_in_use(email, except_user_id=self.instance.pk):
            raise forms.ValidationError(EMAIL_IN_USE)
        return email


User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class OperatorUserAdmin(UserAdmin):
    """Django's user admin with :class:`OperatorUserChangeForm`."""

    form = OperatorUserChangeForm
