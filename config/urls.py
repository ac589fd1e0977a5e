from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from assistant.views import AdminLoginView, ThrottledSignIn
from demo.views import home

urlpatterns = [
    path("", home, name="home"),
    # sign-in pages throttled per account and address, as the app's own (assistant:login)
    path("accounts/login/", ThrottledSignIn.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/login/", AdminLoginView.as_view()),  # (before the admin's own urls)
    path("admin/", admin.site.urls),
    path("assistant/", include("assistant.urls")),
    path("dashboards/", include("dashboards.urls")),
]
