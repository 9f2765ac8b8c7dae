from django import forms
from django.contrib.auth.forms import UserCreationForm

from apps.accounts.models import Scope


class SignUpForm(UserCreationForm):
    """A trader's sign-up: username, optional e-mail, password twice (Django's password validators)."""

    email = forms.EmailField(required=False)

    class Meta(UserCreationForm.Meta):
        fields = ("username", "email")


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=100)
    scopes = forms.MultipleChoiceField(choices=Scope.choices, widget=forms.CheckboxSelectMultiple, initial=["read"])
    withdrawal_addresses = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Optional: one address per line; withdrawals with this key may go only there.",
    )

    def clean_withdrawal_addresses(self) -> list[str]:
        return [line.strip() for line in self.cleaned_data["withdrawal_addresses"].splitlines() if line.strip()]
