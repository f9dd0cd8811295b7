"""The admin, where txqueue's models are listed beside the shop's."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
