"""Web pages of the proofs: a customer's proof of liabilities page and downloads (thin views over selectors)."""

import json
from pathlib import Path

from django.contrib.auth.decorators import login_required
from django.http import FileResponse, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from apps.core.errors import DomainError
from apps.ledger.seal.selectors import entry_proof

from .documents import snapshot_header_of
from .selectors import liabilities_proof, snapshot_latest, snapshots_of_user

VERIFIER = Path(__file__).resolve().parents[2] / "tools" / "verify_liabilities.py"


def _json_download(document: dict, filename: str, status: int = 200) -> HttpResponse:
    response = HttpResponse(
        json.dumps(document, indent=2, ensure_ascii=False), content_type="application/json", status=status
    )
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@login_required
@require_GET
def liabilities(request):
    """The user's balances in the latest snapshot, its published root and totals, how to check them, and the earlier
    snapshots holding their balances (each proof downloadable)."""
    snapshot = snapshot_latest()
    proof = None
    if snapshot is not None:
        try:
            proof = liabilities_proof(request.user.id)
        except DomainError:
            proof = None
    header = snapshot_header_of(snapshot) if snapshot else None
    rows = []
    if header:
        mine = proof["balances"] if proof else [None] * len(header["assets"])
        rows = [
            {"code": asset["code"], "mine": balance, "total": total}
            for asset, balance, total in zip(header["assets"], mine, header["root_sums"], strict=True)
        ]
    earlier = [
        older for older in snapshots_of_user(user_id=request.user.id) if snapshot is None or older.id != snapshot.id
    ]
    context = {"snapshot": snapshot, "header": header, "proof": proof, "rows": rows, "earlier": earlier}
    return render(request, "proofs/liabilities.html", context)


@login_required
@require_GET
def liabilities_proof_download(request, snapshot_id: int | None = None):
    """The user's proof in the latest snapshot, or in snapshot ``snapshot_id``, as a JSON file (what
    ``tools/verify_liabilities.py`` reads)."""
    try:
        proof = liabilities_proof(request.user.id, snapshot_id=snapshot_id)
    except DomainError as exc:
        return _json_download({"error": {"code": exc.code, "message": exc.message}}, "error.json", exc.status)
    return _json_download(proof, f"liabilities-proof-{proof['snapshot']['snapshot_id']}.json")


@login_required
@require_GET
def entry_proof_download(request, entry_id: int):
    """One journal entry's inclusion proof as a JSON file (to its owner, and to staff who may read every entry: ``sees_every_entry``; staff who would but for the second factor a 403, else a 404)."""
    try:
        proof = entry_proof(entry_id, user=request.user)
    except DomainError as exc:
        return _json_download({"error": {"code": exc.code, "message": exc.message}}, "error.json", exc.status)
    return _json_download(proof, f"entry-{entry_id}-proof.json")


@require_GET
def verifier_download(request):
    """The standalone verifier, ``tools/verify_liabilities.py`` (public)."""
    return FileResponse(
        VERIFIER.open("rb"), as_attachment=True, filename="verify_liabilities.py", content_type="text/x-python"
    )
