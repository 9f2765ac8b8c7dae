"""Content negotiation: DRF's, with a ``?format=`` no renderer writes refused as bad input.

DRF answers ``?format=xml`` (or ``api``: the browsable API is off) with a bare 404 ``not_found`` and no field,
as if the resource were missing; API.md refuses a query parameter a view does not read with a 400 naming it.
"""

from rest_framework.negotiation import DefaultContentNegotiation

from apps.core.errors import DomainError


class FormatNegotiation(DefaultContentNegotiation):
    """:class:`DefaultContentNegotiation` whose unknown ``format`` is a 400 ``invalid_request`` naming ``format``
    (:class:`DomainError`) instead of ``Http404``; a ``format`` a renderer writes (the schema's ``?format=json``)
    is negotiated as before."""

    def filter_renderers(self, renderers, format):
        writers = [renderer for renderer in renderers if renderer.format == format]
        if not writers:
            formats = ", ".join(sorted({renderer.format for renderer in renderers}))
            raise DomainError(f"This format is not served here (only {formats}).", fields={"format": "Not served."})
        return writers
