"""The views a project routes itself: sign-in pages throttled as the app's own.

``path("admin/login/", AdminLoginView.as_view())`` before ``admin.site.urls`` guards the admin's
sign-in; ``ThrottledSignIn`` is Django's ``LoginView`` with the same lock for a page of your own.
"""

from .surfaces.pages import AdminLoginView, LoginView, LogoutView, ThrottledSignIn

__all__ = ["AdminLoginView", "LoginView", "LogoutView", "ThrottledSignIn"]
