"""What a locked-out log-in gets (django-axes ``AXES_LOCKOUT_CALLABLE``): 429, in the API's shape for the API."""

from django.http import JsonResponse
from django.shortcuts import render

MESSAGE = "Too many failed log-ins. Try again later."


def lockout_response(request, original_response=None, credentials=None):
    if request.path_info.startswith("/api/"):
        return JsonResponse({"error": {"code": "rate_limited", "message": MESSAGE, "fields": {}}}, status=429)
    return render(request, "registration/locked.html", {"message": MESSAGE}, status=429)
