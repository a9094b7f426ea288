"""``POST /events``: publish the request body to NSQ; 200 once nsqd stored it."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from nsqclient.errors import NSQError

from .nsq import get_writer


@csrf_exempt
@require_POST
def publish_event(request: HttpRequest) -> HttpResponse:
    body = request.body
    if not body:
        return JsonResponse({"error": "empty body"}, status=400)
    try:
        get_writer().pub(settings.NSQ_TOPIC, body, timeout=10)
    except NSQError as exc:  # refused by nsqd, or not reachable in time
        return JsonResponse({"error": str(exc)}, status=503)
    return JsonResponse({"published": True})
