"""Forms that refuse a field sent twice, as the API does (:class:`apps.core.errors.DuplicateField`).

Django's forms read the last value of a repeated field (``QueryDict.__getitem__``), so ``side=buy&side=sell``
placed a sell order from the web while the API refuses the same (break-it review). :class:`SingleValuedForm`
refuses each field given more than once, except those whose widget takes several values (a multiple choice);
:class:`SingleValuedFormSet` refuses a formset's management fields (``<prefix>-TOTAL_FORMS``...) given more than once.
"""

import re

from django import forms
from django.forms.formsets import ManagementForm

DUPLICATE_MESSAGE = "This field was sent more than once: send it once."


def _takes_several(field: forms.Field) -> bool:
    """Whether ``field`` takes several values: a multiple choice, whatever widget shows it (the admin wraps its
    select in ``RelatedFieldWidgetWrapper``, which does not say so itself: break-it review, two groups refused)."""
    if isinstance(field, forms.MultipleChoiceField | forms.ModelMultipleChoiceField):
        return True
    widget = getattr(field.widget, "widget", field.widget)
    return bool(getattr(widget, "allow_multiple_selected", False))


class SingleValuedForm(forms.BaseForm):
    """Mix in before the form class (``class OrderForm(SingleValuedForm, forms.Form)``): a bound form whose data
    holds a single-valued field more than once is invalid, that field's error (code ``duplicate_field``) saying so."""

    def full_clean(self) -> None:
        super().full_clean()
        if not self.is_bound or not hasattr(self.data, "getlist"):
            return
        for name, field in self.fields.items():
            if _takes_several(field):
                continue
            if len(self.data.getlist(self.add_prefix(name))) > 1:
                self.add_error(name, forms.ValidationError(DUPLICATE_MESSAGE, code="duplicate_field"))


class SingleValuedFormSet(forms.BaseFormSet):
    """A formset (``formset_factory(..., formset=SingleValuedFormSet)``) that is invalid when a management field
    (``<prefix>-TOTAL_FORMS``, ``-INITIAL_FORMS``, ``-MIN_NUM_FORMS``, ``-MAX_NUM_FORMS``) was sent more than once:
    Django reads the last one, so ``TOTAL_FORMS=4&TOTAL_FORMS=2`` dropped the third and fourth forms without a word;
    and when a form numbered past ``TOTAL_FORMS`` was sent, which Django ignores alike (break-it review). The error is
    the formset's own (``non_form_errors``, codes ``duplicate_field``, ``forms_past_total``). Use
    :class:`SingleValuedForm` for its forms."""

    def clean(self) -> None:
        super().clean()
        if not hasattr(self.data, "getlist"):
            return
        for name in ManagementForm.base_fields:
            if len(self.data.getlist(f"{self.prefix}-{name}")) > 1:
                raise forms.ValidationError(f"{self.prefix}-{name}: {DUPLICATE_MESSAGE}", code="duplicate_field")
        numbered = re.compile(rf"{re.escape(str(self.prefix))}-(\d+)-")
        past = {int(found[1]) for key in self.data if (found := numbered.match(key))} - set(
            range(self.total_form_count())
        )
        if past:
            raise forms.ValidationError(
                f"Forms past {self.prefix}-TOTAL_FORMS ({self.total_form_count()}) were sent: numbers "
                f"{', '.join(map(str, sorted(past)))}. Send the count of every form.",
                code="forms_past_total",
            )
