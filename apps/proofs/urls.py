from django.urls import path

from . import views

# <id:...> is exchange.converters.ObjectIdConverter, registered by apps.web.urls (imported first by exchange.urls).

app_name = "proofs"

urlpatterns = [
    path("liabilities/", views.liabilities, name="liabilities"),
    path("liabilities/proof.json", views.liabilities_proof_download, name="liabilities-proof"),
    path("liabilities/<id:snapshot_id>/proof.json", views.liabilities_proof_download, name="snapshot-proof"),
    path("verify_liabilities.py", views.verifier_download, name="verifier"),
    path("entries/<id:entry_id>/proof.json", views.entry_proof_download, name="entry-proof"),
]
