from __future__ import annotations

from django.urls import path
from events import views

urlpatterns = [
    path("events", views.publish_event, name="publish-event"),
]
