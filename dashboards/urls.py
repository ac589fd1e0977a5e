from django.urls import path

from .views import documentation

app_name = "dashboards"
urlpatterns = [
    path("<int:pk>/documentation/", documentation, name="documentation"),
]
